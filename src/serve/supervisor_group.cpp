// The supervisor's group thread (serve/supervisor.h): starts the rank group (`mpirun -np N h3 serve-worker ...`),
// waits for rank 0 to connect and load the models, relays its messages, and watches it: a group that exits or
// stays silent past the stall timeout while running a job is killed, the job failed with the reason its log
// gives, and the group recreated.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <thread>

#include "core/knobs.h"
#include "core/log.h"
#include "distributed/launch.h"
#include "serve/channel.h"
#include "serve/group_log.h"
#include "serve/supervisor.h"

extern char** environ;

namespace h3::serve {

namespace fs = std::filesystem;

namespace {

std::string random_token() {
  return new_job_id().substr(6);
}

}  // namespace

double Supervisor::steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void Supervisor::group_loop() {
  double backoff = 1;
  while (!stopping_) {
    const double started = steady_now();
    try {
      if (launch_group()) run_group();
    } catch (const std::exception& e) {
      // Nothing the group thread meets (a store write on a full disk, a broken pipe) may end the server: the
      // group is recreated, the running job failed with the reason.
      spdlog::error("serve: rank group {}: {}", generation_, e.what());
      kill_group("internal error");
      fail_running("generation_failed", std::string("the server failed while running this job: ") + e.what());
      set_state(State::restarting, e.what());
    }
    if (stopping_) break;
    {
      std::lock_guard lock(mu_);
      ++restarts_;
    }
    // A group that dies quickly again and again (bad model path, broken MPI) is retried less and less often.
    backoff = steady_now() - started > 60 ? 1 : std::min(backoff * 2, 60.0);
    set_state(State::restarting);
    spdlog::warn("serve: recreating the rank group in {:.0f} s", backoff);
    const double until = steady_now() + backoff;
    while (!stopping_ && steady_now() < until) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  set_state(State::stopped);
}

Supervisor::GroupCommand Supervisor::group_command(const std::string& sock, const std::string& token) const {
  std::vector<std::string> args;
  if (o_.ranks > 1)
    args = {o_.mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(o_.ranks)};
  const RunnerOptions& r = o_.runner;
  std::vector<std::string> worker = {o_.self_exe,
                                     "--log-level",
                                     o_.log_level,
                                     "--timeout",
                                     fmt::format("{}", o_.rank_timeout_s),
                                     "--ranks",
                                     std::to_string(o_.ranks),
                                     "--device",
                                     r.device,
                                     "serve-worker",
                                     "--control",
                                     sock,
                                     "--runner",
                                     r.kind,
                                     "--mode",
                                     r.mode,
                                     "--tp",
                                     std::to_string(r.tp),
                                     "--chunks",
                                     std::to_string(r.chunks),
                                     "--encoder-ranks",
                                     std::to_string(r.encoder_ranks),
                                     "--fake-step-ms",
                                     std::to_string(r.fake_step_ms),
                                     "--fake-load-ms",
                                     std::to_string(r.fake_load_ms)};
  if (r.write_latents) worker.push_back("--write-latents");
  if (r.deterministic) worker.insert(worker.begin() + 1, "--deterministic");  // a global flag: before the command
  if (r.transport != Transport::automatic)
    worker.insert(worker.begin() + 1, {"--transport", std::string(transport_name(r.transport))});
  worker.push_back("--memory-plan");
  worker.push_back(r.memory);
  const std::pair<const char*, const std::string*> numerics[] = {{"--precision", &r.precision},
                                                                 {"--vae-precision", &r.vae_precision},
                                                                 {"--text-precision", &r.text_precision},
                                                                 {"--text-device", &r.text_device},
                                                                 {"--host-memory", &r.host_memory}};
  for (const auto& [flag, value] : numerics)
    if (!value->empty()) {
      worker.push_back(flag);
      worker.push_back(*value);
    }
  const std::pair<const char*, const std::string*> paths[] = {
      {"--model-dir", &r.paths.model_dir},       {"--dit", &r.paths.dit},
      {"--video-vae", &r.paths.video_vae},       {"--audio-vae", &r.paths.audio_vae},
      {"--text-encoder", &r.paths.text_encoder}, {"--tokenizer", &r.paths.tokenizer}};
  for (const auto& [flag, value] : paths)
    if (!value->empty()) {
      worker.push_back(flag);
      worker.push_back(*value);
    }
  args.insert(args.end(), worker.begin(), worker.end());

  // The knobs this process was given by flag reach the workers as their variables (they read the environment).
  const std::vector<std::string> flag_env = knob_flag_environment();
  auto given_by_flag = [&](const std::string& kv) {
    for (const std::string& f : flag_env)
      if (kv.compare(0, f.find('=') + 1, f, 0, f.find('=') + 1) == 0) return true;
    return false;
  };
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("H3_SERVE_TOKEN=", 0) == 0 || kv.rfind("H3_DEBUG_FAULT=", 0) == 0 || kv.rfind("H3_THREADS=", 0) == 0 ||
        given_by_flag(kv))
      continue;
    env.push_back(kv);
  }
  for (const std::string& f : flag_env)
    if (f.rfind("H3_THREADS=", 0) != 0) env.push_back(f);
  env.push_back("H3_SERVE_TOKEN=" + token);
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT=1");
  env.push_back("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1");
  // The threads knob as this process has it (--threads or H3_THREADS), else the cores shared out between the ranks.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const unsigned threads = knobs().threads > 0 ? static_cast<unsigned>(knobs().threads)
                                               : std::max(1u, cores / static_cast<unsigned>(o_.ranks));
  env.push_back("H3_THREADS=" + std::to_string(threads));
  if (o_.ranks > 1) {  // the group's settings reach ranks on other hosts too
    const auto forward = mpirun_forward_args(env);
    args.insert(args.begin() + 1, forward.begin(), forward.end());
  }
  return {std::move(args), std::move(env)};
}

// Starts the group's command with its output in the group log; the process id, or -1 when fork fails.
pid_t Supervisor::spawn_group(GroupCommand& cmd) {
  std::vector<char*> argv, envp;
  for (auto& a : cmd.args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : cmd.env) envp.push_back(e.data());
  envp.push_back(nullptr);
  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  spdlog::info("serve: starting rank group {} ({} rank{}), log {}", generation_, o_.ranks, o_.ranks > 1 ? "s" : "",
               log_path_);
  const pid_t parent = ::getpid();
  pid_t pid = ::fork();
  if (pid == 0) {
    // Only async-signal-safe calls from here to exec. The group dies with the supervisor (PDEATHSIG), in a
    // process group of its own so it can be killed as a whole, with none of the server's sockets inherited.
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    if (log_fd >= 0) {
      ::dup2(log_fd, 1);
      ::dup2(log_fd, 2);
    }
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    ::execvpe(argv[0], argv.data(), envp.data());
    const char msg[] = "serve: cannot exec the rank group command\n";
    [[maybe_unused]] ssize_t n = ::write(2, msg, sizeof(msg) - 1);
    ::_exit(127);
  }
  if (log_fd >= 0) ::close(log_fd);
  return pid;
}

// Waits for rank 0 to connect and prove it is ours (the group's token); false when it does not within the
// startup timeout, the group exits first, or the server stops.
bool Supervisor::await_rank0(int listen_fd, const std::string& token) {
  const double deadline = steady_now() + o_.startup_timeout_s;
  while (!stopping_ && steady_now() < deadline) {
    pollfd p[2] = {{listen_fd, POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    ::poll(p, 2, 200);
    if (p[1].revents) {
      char buf[64];
      while (::read(wake_pipe_[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (p[0].revents & POLLIN) {
      int c = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      auto ch = std::make_unique<LineChannel>(c);
      auto hello = ch->receive(10000);
      if (hello && (*hello)["type"] == "hello" && hello->value("token", "") == token) {
        channel_ = std::move(ch);
        return true;
      }
      spdlog::warn("serve: refused a control connection that did not present the group's token");
    }
    if (::waitpid(child_, &child_status_, WNOHANG) == child_) {
      child_ = -1;
      return false;
    }
  }
  return false;
}

bool Supervisor::launch_group() {
  const int gen = ++generation_;
  const std::string sock = run_dir_ + "/ctl-" + std::to_string(gen) + ".sock";
  const std::string token = random_token();
  log_path_ = (fs::path(o_.store_dir) / "logs" / fmt::format("group-{}.log", gen)).string();
  int listen_fd = unix_listen(sock);
  GroupCommand cmd = group_command(sock, token);
  set_state(State::starting);
  const pid_t pid = spawn_group(cmd);
  if (pid < 0) {
    ::close(listen_fd);
    set_state(State::restarting, fmt::format("cannot start the rank group: fork: {}", std::strerror(errno)));
    return false;
  }
  child_ = pid;
  // Rank 0 connects, then the models load (run_group waits for its "ready").
  const bool connected = await_rank0(listen_fd, token);
  ::close(listen_fd);
  ::unlink(sock.c_str());
  if (!connected) {
    std::string why = stopping_ ? "" : reap_reason();
    kill_group("it did not connect");
    if (!stopping_)
      set_state(State::restarting, "the rank group did not start: " + (why.empty() ? "no connection" : why));
    return false;
  }
  set_state(State::loading);
  return true;
}

void Supervisor::kill_group(const std::string& why) {
  channel_.reset();
  if (child_ <= 0) return;
  spdlog::warn("serve: stopping rank group {} ({})", generation_, why);
  ::kill(-child_, SIGTERM);
  ::kill(child_, SIGTERM);
  const double until = steady_now() + 5;
  while (steady_now() < until) {
    if (::waitpid(child_, &child_status_, WNOHANG) == child_) {
      child_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  if (child_ > 0) {
    ::kill(-child_, SIGKILL);
    ::kill(child_, SIGKILL);
    ::waitpid(child_, &child_status_, 0);
    child_ = -1;
  }
  // Ranks that left mpirun's process group still stop: PDEATHSIG, or their next collective times out.
}

std::string Supervisor::reap_reason() {
  // Give mpirun a moment to write its report and exit before reading the log.
  const double until = steady_now() + 3;
  while (child_ > 0 && steady_now() < until) {
    if (::waitpid(child_, &child_status_, WNOHANG) == child_) {
      child_ = -1;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::string line = culprit_line(file_tail(log_path_, 65536));
  std::string status;
  if (child_ < 0) {
    if (WIFEXITED(child_status_))
      status = fmt::format("exit status {}", WEXITSTATUS(child_status_));
    else if (WIFSIGNALED(child_status_))
      status = fmt::format("signal {}", WTERMSIG(child_status_));
  }
  std::string why = line.empty() ? "the rank group exited" : line;
  if (!status.empty()) why += " (group " + status + ")";
  return why + "; log: " + log_path_;
}

// The group's "ready": the models are loaded; their limits and descriptions are kept (in the store too).
void Supervisor::on_ready(const nlohmann::json& m) {
  {
    std::lock_guard lock(mu_);
    limits_ = m.value("limits", nlohmann::json::object());
    models_ = m.value("models", nlohmann::json::array());
    last_load_s_ = m.value("load_s", 0.0);
    notice_ = m.value("notice", "");
    last_error_.clear();
  }
  try {
    store_->put_meta("limits", dump_json(limits_));
    store_->put_meta("models", dump_json(models_));
    store_->put_meta("notice", notice_);
  } catch (const std::exception& e) {
    spdlog::error("serve: cannot keep the model limits in the store: {}", e.what());
  }
  spdlog::info("serve: rank group {} ready ({:.1f} s to load the models)", generation_, last_load_s_);
  set_state(State::ready);
}

// Handles every message rank 0 has sent; false when the channel has ended (`death` then says why).
bool Supervisor::drain_messages(bool& loaded, std::string& death) {
  // (messages may already be buffered from the hello's read, so always drain)
  while (auto m = channel_->receive(0)) {
    last_word_ = steady_now();
    const std::string type = (*m)["type"].get<std::string>();
    if (type == "ready") {
      loaded = true;
      on_ready(*m);
    } else if (type == "fatal") {
      death = m->value("error", "the rank group failed to start");
    } else {
      try {
        on_message(*m);
      } catch (const std::exception& e) {
        spdlog::error("serve: the store failed while recording a message of the rank group: {}", e.what());
      }
    }
  }
  if (!channel_->eof()) return true;
  if (death.empty()) death = reap_reason();
  return false;
}

// The server stops: the group is asked to shut down (then killed), and a running job goes back to the queue.
void Supervisor::shutdown_group() {
  std::string running;
  {
    std::lock_guard lock(mu_);
    running = running_;
    running_.clear();
  }
  channel_->send({{"type", "shutdown"}});
  const double until = steady_now() + 10;
  while (child_ > 0 && steady_now() < until) {
    if (::waitpid(child_, &child_status_, WNOHANG) == child_)
      child_ = -1;
    else
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill_group("server shutting down");
  try {
    if (!running.empty() && store_->requeue(running)) {
      spdlog::warn("serve: job {} was running; it goes back to the queue", running);
      publish_job(running);
    }
  } catch (const std::exception& e) {
    spdlog::error("serve: cannot requeue job {} ({}); the next start requeues it", running, e.what());
  }
}

void Supervisor::run_group() {
  last_word_ = steady_now();
  const double load_deadline = steady_now() + o_.startup_timeout_s;
  bool loaded = false;
  std::string death;
  while (!stopping_) {
    // Send what is waiting (cancels), then start the next job when idle.
    std::deque<nlohmann::json> out;
    {
      std::lock_guard lock(mu_);
      out.swap(outbox_);
    }
    for (auto& m : out)
      if (!channel_->send(m)) break;
    retry_pending();
    if (loaded) {
      try {
        dispatch_next();
        maybe_preempt();
      } catch (const std::exception& e) {
        const double now = steady_now();
        if (now - last_store_error_ > 30) spdlog::error("serve: cannot start the next job: {}", e.what());
        last_store_error_ = now;
      }
    }

    pollfd p[2] = {{channel_->fd(), POLLIN, 0}, {wake_pipe_[0], POLLIN, 0}};
    ::poll(p, 2, 250);
    if (p[1].revents) {
      char buf[64];
      while (::read(wake_pipe_[0], buf, sizeof(buf)) > 0) {
      }
    }
    if (!drain_messages(loaded, death)) break;
    if (::waitpid(child_, &child_status_, WNOHANG) == child_) {
      child_ = -1;
      death = death.empty() ? reap_reason() : death;
      break;
    }
    std::string running;
    {
      std::lock_guard lock(mu_);
      running = running_;
    }
    if (!loaded && steady_now() > load_deadline) {
      death = fmt::format("the models did not load within {:.0f} s (--startup-timeout)", o_.startup_timeout_s);
      break;
    }
    if (!running.empty() && steady_now() - last_word_ > o_.stall_timeout_s) {
      std::string line = culprit_line(file_tail(log_path_, 65536));
      death = fmt::format(
          "the rank group sent nothing for {:.0f} s while running the job (stall timeout "
          "--stall-timeout {:.0f} s){}; log: {}",
          steady_now() - last_word_, o_.stall_timeout_s, line.empty() ? "" : ": " + line, log_path_);
      break;
    }
  }
  if (stopping_) return shutdown_group();
  spdlog::error("serve: rank group {} failed: {}", generation_, death);
  kill_group("it failed");
  fail_running("rank_failed", "the rank group failed while running this job: " + death);
  set_state(State::restarting, death);
}

}  // namespace h3::serve

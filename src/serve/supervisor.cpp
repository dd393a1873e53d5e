#include "serve/supervisor.h"

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
#include <regex>
#include <thread>

#include "core/knobs.h"
#include "core/log.h"
#include "distributed/launch.h"
#include "serve/channel.h"

extern char** environ;

namespace h3::serve {

namespace fs = std::filesystem;

namespace {

double steady_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

std::string random_token() {
  return new_job_id().substr(6);
}

// The last `bytes` of a file.
std::string file_tail(const std::string& path, size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(f.tellg());
  const size_t from = size > bytes ? size - bytes : 0;
  f.seekg(static_cast<std::streamoff>(from));
  std::string s(size - from, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

// The most specific line of a dead group's log that says which rank failed and why.
std::string culprit_line(const std::string& log) {
  static const std::regex patterns[] = {
      std::regex(R"(no data from rank \d+)"),
      std::regex(R"(process rank \d+ with PID \d+ on node \S+ exited on signal)"),
      std::regex(R"(rank \d+ \([^)]*\): .*)"),
      std::regex(R"(rank \d+ .*(exited|killed|signal|abort))", std::regex::icase),
  };
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < log.size()) {
    size_t nl = log.find('\n', start);
    if (nl == std::string::npos) nl = log.size();
    lines.push_back(log.substr(start, nl - start));
    start = nl + 1;
  }
  for (const auto& re : patterns)
    for (const auto& l : lines)
      if (std::regex_search(l, re)) {
        std::string t = l;
        // Drop the log prefix ("12:00:00.000 error [rank 1/2] ") and mpirun's decoration.
        auto p = t.find("rank ");
        if (p != std::string::npos && p > 0 && t.find("[rank") == std::string::npos) t = t.substr(p);
        while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) t.pop_back();
        return t.size() > 600 ? t.substr(0, 600) : t;
      }
  return "";
}

}  // namespace

const char* Supervisor::state_name(State s) {
  switch (s) {
    case State::starting:
      return "starting";
    case State::loading:
      return "loading";
    case State::ready:
      return "ready";
    case State::busy:
      return "busy";
    case State::restarting:
      return "restarting";
    case State::stopped:
      return "stopped";
  }
  return "?";
}

Supervisor::Supervisor(ServeOptions options) : o_(std::move(options)) {
  if (o_.stall_timeout_s <= 0) o_.stall_timeout_s = 2 * o_.rank_timeout_s + 30;
  store_ = std::make_unique<JobStore>(o_.store_dir);
  for (const auto& id : store_->recover(o_.max_attempts)) {
    auto r = store_->get(id);
    if (r) spdlog::warn("job {} was running when the server stopped: now {}", id, r->status);
  }
  if (const int n = store_->sweep_partials()) spdlog::info("serve: removed {} unfinished output file(s)", n);
  auto meta_json = [&](const char* key, nlohmann::json fallback) {
    auto v = store_->get_meta(key);
    if (!v) return fallback;
    auto j = nlohmann::json::parse(*v, nullptr, false);
    return j.is_discarded() ? fallback : j;
  };
  limits_ = meta_json("limits", nlohmann::json());
  models_ = meta_json("models", nlohmann::json::array());
  if (auto n = store_->get_meta("notice")) notice_ = *n;
  measured_ = meta_json("measured", nlohmann::json());
  // Requests can be checked before the group has loaded anything: the fake runner keeps the released rules,
  // the generator reads them from the paths alone (at most the video VAE's config).
  if (o_.runner.kind == "fake") {
    limits_ = limits_to_json(ModelLimits::released());
  } else {
    try {
      limits_ = limits_to_json(Generator::limits_for(o_.runner.paths));
    } catch (const std::exception& e) {
      spdlog::warn("serve: request limits unknown until the models load: {}", e.what());
    }
  }
  std::error_code ec;
  fs::create_directories(fs::path(o_.store_dir) / "logs", ec);
  if (::pipe2(wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) fail("serve: pipe(): {}", std::strerror(errno));
  // The control socket lives in a private folder with a short path (Unix socket paths are limited to 107
  // bytes).
  const std::string& tmp = knobs().tmpdir;
  std::string tmpl = (tmp.empty() ? std::string("/tmp") : tmp) + "/h3serve-XXXXXX";
  if (tmpl.size() > 80) tmpl = "/tmp/h3serve-XXXXXX";
  if (!::mkdtemp(tmpl.data())) fail("serve: cannot create a folder for the control socket: {}", std::strerror(errno));
  run_dir_ = tmpl;
}

Supervisor::~Supervisor() {
  stop();
  for (int fd : wake_pipe_)
    if (fd >= 0) ::close(fd);
  std::error_code ec;
  fs::remove_all(run_dir_, ec);
}

void Supervisor::start() {
  group_thread_ = std::thread([this] { group_loop(); });
}

void Supervisor::stop() {
  if (stopping_.exchange(true)) {
    if (group_thread_.joinable()) group_thread_.join();
    return;
  }
  wake();
  if (group_thread_.joinable()) group_thread_.join();
  events_.close();
}

void Supervisor::wake() {
  char c = 1;
  [[maybe_unused]] ssize_t n = ::write(wake_pipe_[1], &c, 1);
}

void Supervisor::post(nlohmann::json message) {
  {
    std::lock_guard lock(mu_);
    outbox_.push_back(std::move(message));
  }
  wake();
}

void Supervisor::set_state(State s, const std::string& error) {
  {
    std::lock_guard lock(mu_);
    state_ = s;
    if (!error.empty()) last_error_ = error;
    if (s == State::ready && ready_since_ == 0) ready_since_ = unix_now();
  }
  events_.publish("group", "", health());
}

void Supervisor::publish_job(const std::string& id) {
  try {
    events_.publish("video", id, job_json(get(id)));
  } catch (const ApiError&) {
  } catch (const std::exception& e) {
    spdlog::error("serve: cannot read job {} back from the store: {}", id, e.what());
  }
}

// ---- the group thread
// ------------------------------------------------------------------------------------------

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

bool Supervisor::launch_group() {
  const int gen = ++generation_;
  const std::string sock = run_dir_ + "/ctl-" + std::to_string(gen) + ".sock";
  const std::string token = random_token();
  log_path_ = (fs::path(o_.store_dir) / "logs" / fmt::format("group-{}.log", gen)).string();
  int listen_fd = unix_listen(sock);

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
                                                                 {"--text-device", &r.text_device}};
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
  std::vector<char*> argv, envp;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);

  int log_fd = ::open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  set_state(State::starting);
  spdlog::info("serve: starting rank group {} ({} rank{}), log {}", gen, o_.ranks, o_.ranks > 1 ? "s" : "", log_path_);
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
  if (pid < 0) {
    ::close(listen_fd);
    set_state(State::restarting, fmt::format("cannot start the rank group: fork: {}", std::strerror(errno)));
    return false;
  }
  child_ = pid;

  // Wait for rank 0 to connect and prove it is ours, then for the models to load.
  const double deadline = steady_now() + o_.startup_timeout_s;
  int conn = -1;
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
        conn = c;
        break;
      }
      spdlog::warn("serve: refused a control connection that did not present the group's token");
    }
    if (::waitpid(child_, &child_status_, WNOHANG) == child_) {
      child_ = -1;
      break;
    }
  }
  ::close(listen_fd);
  ::unlink(sock.c_str());
  if (conn < 0) {
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
    {  // (messages may already be buffered from the hello's read, so always drain)
      while (auto m = channel_->receive(0)) {
        last_word_ = steady_now();
        const std::string type = (*m)["type"].get<std::string>();
        if (type == "ready") {
          loaded = true;
          {
            std::lock_guard lock(mu_);
            limits_ = m->value("limits", nlohmann::json::object());
            models_ = m->value("models", nlohmann::json::array());
            last_load_s_ = m->value("load_s", 0.0);
            notice_ = m->value("notice", "");
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
      if (channel_->eof()) {
        if (death.empty()) death = reap_reason();
        break;
      }
    }
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
  if (stopping_) {
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
    return;
  }
  spdlog::error("serve: rank group {} failed: {}", generation_, death);
  kill_group("it failed");
  fail_running("rank_failed", "the rank group failed while running this job: " + death);
  set_state(State::restarting, death);
}

void Supervisor::fail_running(const std::string& code, const std::string& message) {
  std::string id;
  {
    std::lock_guard lock(mu_);
    id.swap(running_);
  }
  if (id.empty()) return;
  store_->remove_partials(id);
  ++jobs_failed_;
  finish_job(id, kFailed, code, message, 0, nlohmann::json::object());
}

void Supervisor::finish_job(const std::string& id, const std::string& status, const std::string& code,
                            const std::string& message, int64_t bytes, const nlohmann::json& result) {
  try {
    store_->finish(id, status, code, message, bytes, result);
  } catch (const std::exception& e) {
    // The record cannot be written now (disk full): kept here and retried, and shown by the API meanwhile.
    spdlog::error("serve: cannot record job {} as {} ({}); retrying", id, status, e.what());
    std::lock_guard lock(mu_);
    pending_[id] = PendingFinish{status, code, message, bytes, result};
  }
  publish_job(id);
}

void Supervisor::retry_pending() {
  std::map<std::string, PendingFinish> todo;
  {
    std::lock_guard lock(mu_);
    if (pending_.empty()) return;
    todo = pending_;
  }
  for (const auto& [id, p] : todo) {
    try {
      store_->finish(id, p.status, p.code, p.message, p.bytes, p.result);
    } catch (const std::exception&) {
      continue;
    }
    {
      std::lock_guard lock(mu_);
      pending_.erase(id);
    }
    spdlog::info("serve: job {} recorded as {}", id, p.status);
    publish_job(id);
  }
}

void Supervisor::dispatch_next() {
  {
    std::lock_guard lock(mu_);
    if (!running_.empty() || state_ != State::ready) return;
  }
  auto next = store_->next_queued();
  if (!next) return;
  if (!next->damaged.empty()) {
    // A row whose parameters do not parse cannot run; it fails with the reason and the queue goes on.
    if (store_->mark_running(next->id)) {
      ++jobs_failed_;
      finish_job(next->id, kFailed, "generation_failed",
                 fmt::format("the job's record in the store is damaged (its {} did not parse); submit it again",
                             next->damaged),
                 0, nlohmann::json::object());
    }
    return;
  }
  if (!store_->mark_running(next->id)) return;
  {
    std::lock_guard lock(mu_);
    running_ = next->id;
  }
  nlohmann::json job = {
      {"type", "job"}, {"id", next->id}, {"request", next->resolved}, {"out", store_->output_path(next->id)}};
  if (o_.debug_faults && next->request.contains("x_debug_fault") && next->request["x_debug_fault"].is_string())
    job["fault"] = next->request["x_debug_fault"];
  last_word_ = steady_now();
  set_state(State::busy);
  publish_job(next->id);
  spdlog::info("serve: running job {}", next->id);
  channel_->send(job);
}

void Supervisor::on_message(const nlohmann::json& m) {
  const std::string type = m["type"].get<std::string>();
  const std::string id = m.value("id", "");
  {
    std::lock_guard lock(mu_);
    if (id.empty() || id != running_) return;
  }
  if (type == "progress") {
    auto num = [&](const char* k, double d) { return m.contains(k) && m[k].is_number() ? m[k].get<double>() : d; };
    store_->update_progress(id, m.value("phase", ""), static_cast<int>(num("step", 0)),
                            static_cast<int>(num("steps", 0)), std::clamp(num("percent", 0), 0.0, 100.0),
                            num("eta_s", -1));
    publish_job(id);
  } else if (type == "done") {
    const std::string status = m.value("status", "failed");
    int64_t bytes = 0;
    std::string error = m.value("error", "");
    std::string st = status;
    if (status == "completed") {
      std::error_code ec;
      bytes = static_cast<int64_t>(fs::file_size(store_->output_path(id), ec));
      const auto& res = m.contains("result") ? m["result"] : nlohmann::json();
      if (ec && res.is_object() && res.value("wrote_mp4", true) == false) {
        bytes = 0;  // a build without the MP4 writer: latents only, no content to serve
      } else if (ec) {
        st = kFailed;
        error = "the rank group reported success but wrote no output file";
      }
    }
    const std::string code = st == kCompleted ? "" : st == kCancelled ? "cancelled" : "generation_failed";
    if (st != kCompleted) store_->remove_partials(id);
    std::optional<JobRecord> rec;
    try {
      rec = store_->get(id);
    } catch (const std::exception&) {
    }
    {
      std::lock_guard lock(mu_);
      running_.clear();
    }
    finish_job(id, st, code, error, bytes, m.value("result", nlohmann::json::object()));
    if (st == kCompleted && rec && m.contains("result")) record_timing(*rec, m["result"]);
    if (st == kCompleted)
      ++jobs_completed_;
    else if (st == kCancelled)
      ++jobs_cancelled_;
    else
      ++jobs_failed_;
    if (rec) {
      std::lock_guard lock(mu_);
      job_seconds_sum_ += unix_now() - rec->started_at;
    }
    spdlog::info("serve: job {} {}{}", id, st, error.empty() ? "" : ": " + error);
    set_state(State::ready);
  }
}

// The last completed job's time per DiT call and for everything else, with its geometry: the web page scales it
// to estimate a request before it is sent (docs/api.md, GET /v1/models "measured").
void Supervisor::record_timing(const JobRecord& job, const nlohmann::json& result) {
  const nlohmann::json& p = job.resolved;
  if (!result.is_object() || !result.contains("timings") || !result["timings"].is_object()) return;
  const int calls = p.value("model_calls", 0);
  double denoise = 0, other = 0;
  for (auto it = result["timings"].begin(); it != result["timings"].end(); ++it) {
    if (!it.value().is_number() || it.key() == "load" || it.key() == "lora_merge") continue;
    (it.key() == "denoise" ? denoise : other) += it.value().get<double>();
  }
  if (calls <= 0 || denoise <= 0) return;
  nlohmann::json m = {{"job", job.id},
                      {"at", static_cast<int64_t>(unix_now())},
                      {"seconds_per_call", denoise / calls},
                      {"other_seconds", other},
                      {"width", p.value("width", 0)},
                      {"height", p.value("height", 0)},
                      {"frames", p.value("frames", 0)},
                      {"latent_frames", p.value("latent_frames", 0)},
                      {"latent_h", p.value("latent_h", 0)},
                      {"latent_w", p.value("latent_w", 0)},
                      {"model_calls", calls}};
  {
    std::lock_guard lock(mu_);
    measured_ = m;
  }
  try {
    store_->put_meta("measured", dump_json(m));
  } catch (const std::exception& e) {
    spdlog::warn("serve: cannot keep the measured step time in the store: {}", e.what());
  }
}

}  // namespace h3::serve

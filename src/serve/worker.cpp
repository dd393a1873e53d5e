#include "serve/worker.h"

#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "core/json_limits.h"
#include "core/knobs.h"
#include "core/log.h"
#include "serve/at_work.h"
#include "serve/channel.h"
#include "serve/store.h"

namespace h3::serve {

namespace {

// How often rank 0 says it is at work during a long call: far inside the stall timeout (2 x --timeout + 30 s).
constexpr double kAtWorkEveryS = 10;

// Rank 0's side of the control channel: the reader thread's inbox and the running job's cancel flag.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<nlohmann::json> commands;  // job / shutdown
  std::string running;                  // id of the job in progress ("" when idle)
  std::atomic<bool> cancel{false};
  std::string pending_cancel;

  void reader(LineChannel& ch) {
    for (;;) {
      auto m = ch.receive(-1);
      if (!m) break;
      const std::string type = (*m)["type"].get<std::string>();
      std::lock_guard lock(mu);
      if (type == "cancel") {
        const std::string id = m->value("id", "");
        // A job still waiting in the inbox starts cancelled (it must still run, so "done" is reported).
        if (!id.empty() && id == running)
          cancel = true;
        else
          pending_cancel = id;
      } else if (type == "job" || type == "shutdown") {
        commands.push_back(std::move(*m));
        cv.notify_all();
      }
    }
    std::lock_guard lock(mu);
    commands.push_back({{"type", "shutdown"}, {"why", "the supervisor closed the control channel"}});
    cv.notify_all();
  }

  nlohmann::json next(double wait_s) {
    std::unique_lock lock(mu);
    cv.wait_for(lock, std::chrono::duration<double>(wait_s), [&] { return !commands.empty(); });
    if (commands.empty()) return {{"type", "tick"}};
    nlohmann::json c = std::move(commands.front());
    commands.pop_front();
    if (c["type"] == "job") {
      running = c.value("id", "");
      cancel = !running.empty() && running == pending_cancel;
    }
    return c;
  }

  void finished() {
    std::lock_guard lock(mu);
    running.clear();
    cancel = false;
  }
};

// Rank 0's command reaches every rank: its length, then its bytes.
nlohmann::json broadcast_command(Comm& comm, const nlohmann::json& on_root) {
  std::string text = comm.rank() == 0 ? dump_json(on_root) : std::string();
  int64_t n = static_cast<int64_t>(text.size());
  comm.broadcast(&n, sizeof(n), 0, "serve command length");
  text.resize(static_cast<size_t>(n));
  comm.broadcast(text.data(), n, 0, "serve command");
  return comm.rank() == 0 ? on_root : parse_json_bounded(text, "serve command", kJsonMaxDepth, false);
}

}  // namespace

int run_worker(const WorkerOptions& o) {
  Comm& comm = world();
  std::unique_ptr<LineChannel> ch;
  Inbox inbox;
  if (comm.rank() == 0) {
    ch = std::make_unique<LineChannel>(unix_connect(o.control, 60));
    std::vector<std::string> hosts = {comm.host()};
    ch->send(
        {{"type", "hello"}, {"token", o.token}, {"ranks", comm.size()}, {"pid", ::getpid()}, {"host", comm.host()}});
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_ptr<JobRunner> runner;
  try {
    runner = make_runner(o.runner, comm);
  } catch (const std::exception& e) {
    if (ch) ch->send({{"type", "fatal"}, {"error", std::string("loading the models failed: ") + e.what()}});
    throw;
  }
  const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::thread reader;
  if (ch) {
    ch->send({{"type", "ready"},
              {"limits", limits_to_json(runner->limits())},
              {"models", runner->describe()},
              {"notice", runner->notice()},
              {"load_s", load_s},
              {"ranks", comm.size()}});
    reader = std::thread([&] { inbox.reader(*ch); });
  }
  spdlog::info("serve-worker: rank {} of {} ready ({:.1f} s to load)", comm.rank(), comm.size(), load_s);

  int status = 0;
  for (;;) {
    nlohmann::json cmd = broadcast_command(comm, comm.rank() == 0 ? inbox.next(o.tick_s) : nlohmann::json());
    const std::string type = cmd.value("type", "");
    if (type == "tick") continue;
    if (type == "shutdown") {
      spdlog::info("serve-worker: shutting down ({})", cmd.value("why", "asked by the supervisor"));
      break;
    }
    if (type != "job") continue;
    const std::string id = cmd.value("id", "");
    set_debug_fault(cmd.value("fault", ""));  // the job's test fault (x_debug_fault), read by the runners
    nlohmann::json done = {{"type", "done"}, {"id", id}};
    try {
      ResolvedRequest req = ResolvedRequest::from_json(cmd.at("request"));
      ProgressFn progress;
      if (ch)
        progress = [&](const GenerateProgress& p) {
          ch->send({{"type", "progress"},
                    {"id", id},
                    {"phase", p.phase},
                    {"step", p.step},
                    {"steps", p.steps},
                    {"percent", p.percent},
                    {"eta_s", p.eta_s}});
        };
      // Between progress messages, "at work" every 10 s while rank 0 computes (serve/at_work.h).
      std::optional<AtWork> at_work;
      if (ch) at_work.emplace([&] { ch->send({{"type", "at_work"}, {"id", id}}); }, kAtWorkEveryS);
      nlohmann::json result = runner->run(req, cmd.value("out", ""), progress, &inbox.cancel);
      done["status"] = "completed";
      done["result"] = result;
    } catch (const Cancelled& e) {
      done["status"] = "cancelled";
      done["error"] = e.what();
    } catch (const std::exception& e) {
      done["status"] = "failed";
      done["error"] =
          comm.size() > 1 ? fmt::format("rank {} ({}): {}", comm.rank(), comm.host(), e.what()) : std::string(e.what());
    }
    set_debug_fault("");
    if (ch) {
      inbox.finished();
      ch->send(done);
    }
  }
  if (ch) {
    ch->shutdown();
    reader.join();
  }
  return status;
}

}  // namespace h3::serve

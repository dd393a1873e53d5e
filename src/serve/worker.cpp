#include "serve/worker.h"

#include <unistd.h>
#ifdef __GLIBC__
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <thread>

#include "core/json_limits.h"
#include "core/knobs.h"
#include "core/log.h"
#include "media/mp4_writer.h"
#include "serve/at_work.h"
#include "serve/channel.h"
#include "serve/inbox.h"
#include "serve/store.h"

namespace h3::serve {

namespace {

// How often rank 0 says it is at work during a long call: far inside the stall timeout (2 x --timeout + 30 s).
constexpr double kAtWorkEveryS = 10;

// The jobs this rank suspended for others (RunHooks::suspend): each one's state and the video it stopped in. Every
// rank keeps its own; the supervisor keeps the count small (Supervisor::maybe_preempt) and says when one is dropped.
struct SavedJob {
  std::shared_ptr<SuspendedRun> state;
  int index = 0;
};

// Whether every rank has the state of job `id` (a group started since the job stopped has none): the job resumes only
// then, on every rank, and starts afresh otherwise.
bool all_have(Comm& comm, const std::map<std::string, SavedJob>& saved, const std::string& id) {
  const int32_t mine = saved.count(id) ? 1 : 0;
  if (comm.size() == 1) return mine == 1;
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.allgatherv(&mine, all.data(), std::vector<int64_t>(all.size(), 1), DType::i32, "serve: resume state");
  return std::all_of(all.begin(), all.end(), [](int32_t v) { return v == 1; });
}

// Rank 0 writes a preview where the supervisor said and tells it; the PNG is replaced atomically.
void send_preview(LineChannel& ch, const std::string& id, int index, const std::string& path, const PreviewPicture& p) {
  try {
    write_png(path, p.picture);
  } catch (const std::exception& e) {
    spdlog::warn("serve-worker: the preview of job {} could not be written: {}", id, e.what());
    return;
  }
  ch.send({{"type", "preview"},
           {"id", id},
           {"index", index},
           {"step", p.step},
           {"steps", p.steps},
           {"frame", p.frame},
           {"width", p.picture.dim(2)},
           {"height", p.picture.dim(1)}});
}

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
  std::map<std::string, SavedJob> saved;  // jobs suspended for others (this rank's states)
  std::unique_ptr<JobRunner> fake;        // x_debug_runner "fake" (tests only), made on first use
  for (;;) {
    nlohmann::json cmd = broadcast_command(comm, comm.rank() == 0 ? inbox.next(o.tick_s) : nlohmann::json());
    const std::string type = cmd.value("type", "");
    if (type == "tick") continue;
    if (type == "shutdown") {
      spdlog::info("serve-worker: shutting down ({})", cmd.value("why", "asked by the supervisor"));
      break;
    }
    if (type == "forget") {
      saved.erase(cmd.value("id", ""));
      continue;
    }
    if (type != "job") continue;
    const std::string id = cmd.value("id", "");
    set_debug_fault(cmd.value("fault", ""));  // the job's test fault (x_debug_fault), read by the runners
    nlohmann::json done = {{"type", "done"}, {"id", id}};
    // The state a suspended job left, when every rank still has it.
    const bool resume = cmd.value("resume", false) && all_have(comm, saved, id);
    SavedJob from;
    if (auto it = saved.find(id); it != saved.end()) {
      if (resume) from = it->second;
      saved.erase(it);
    }
    try {
      // x_debug_runner "fake" (tests, --debug-faults): this job on the fake runner, made on first use by every rank.
      if (cmd.value("runner", "") == "fake" && !fake) {
        RunnerOptions fo = o.runner;
        fo.fake_load_ms = 0;
        fake = make_fake_runner(fo, comm);
      }
      JobRunner& r = cmd.value("runner", "") == "fake" ? *fake : *runner;
      const ResolvedRequest base = ResolvedRequest::from_json(cmd.at("request"));
      // The videos still to make (seed, output), in order; `n` of the job in all, the others made before.
      std::vector<nlohmann::json> videos;
      if (cmd.contains("videos") && cmd["videos"].is_array())
        for (const auto& v : cmd["videos"]) videos.push_back(v);
      else
        videos.push_back({{"index", 0}, {"seed", base.seed}, {"out", cmd.value("out", "")}});
      const int n = std::max<int>(cmd.value("n", 1), static_cast<int>(videos.size()));
      const int made_before = n - static_cast<int>(videos.size());
      const auto t_job = std::chrono::steady_clock::now();
      nlohmann::json result;
      for (size_t i = 0; i < videos.size(); ++i) {
        const int index = videos[i].value("index", 0);
        ResolvedRequest req = base;
        req.seed = videos[i].value("seed", base.seed);
        // Progress of the job: the videos made, and this one's share; the ETA adds the videos after it at the time
        // one takes.
        const double before = made_before + static_cast<double>(i),
                     left_after = static_cast<double>(videos.size() - i - 1);
        ProgressFn progress;
        if (ch)
          progress = [&, before, left_after](const GenerateProgress& p) {
            double eta = p.eta_s;
            if (eta >= 0 && left_after > 0) {
              const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_job).count();
              const double share = i + p.percent / 100.0;
              eta += share > 0.05 ? el / share * left_after : 0;
            }
            ch->send({{"type", "progress"},
                      {"id", id},
                      {"phase", p.phase},
                      {"step", p.step},
                      {"steps", p.steps},
                      {"video_index", index},
                      {"percent", (before + p.percent / 100.0) / n * 100.0},
                      {"eta_s", p.phase == "done" && left_after > 0 ? -1.0 : eta}});
          };
        RunHooks hooks;
        hooks.suspend = &inbox.suspend;
        if (from.state && from.index == index) hooks.resume = std::move(from.state);
        const int every = cmd.value("preview_every", 0);
        const std::string preview_out = cmd.value("preview_out", "");
        if (ch && every > 0 && !preview_out.empty()) {
          hooks.preview_every = every;
          hooks.preview = [&, index](const PreviewPicture& p) { send_preview(*ch, id, index, preview_out, p); };
        }
        // Between progress messages, "at work" every 10 s while rank 0 computes (serve/at_work.h).
        std::optional<AtWork> at_work;
        if (ch) at_work.emplace([&] { ch->send({{"type", "at_work"}, {"id", id}}); }, kAtWorkEveryS);
        try {
          result = r.run(req, videos[i].value("out", ""), progress, &inbox.cancel, hooks);
        } catch (const Suspended& e) {
          saved[id] = SavedJob{e.state, index};
          throw;
        }
        if (ch) ch->send({{"type", "video_done"}, {"id", id}, {"index", index}, {"result", result}});
      }
      done["status"] = "completed";
      done["result"] = result;
    } catch (const Suspended& e) {
      done["status"] = "suspended";
      done["error"] = e.what();
    } catch (const Cancelled& e) {
      done["status"] = "cancelled";
      done["error"] = e.what();
    } catch (const std::exception& e) {
      done["status"] = "failed";
      done["error"] =
          comm.size() > 1 ? fmt::format("rank {} ({}): {}", comm.rank(), comm.host(), e.what()) : std::string(e.what());
    }
    set_debug_fault("");
    // What the job freed goes back to the system: jobs of other sizes and modes would otherwise leave the heap at its
    // high-water mark for the group's life (the soak measures the workers' memory between jobs).
#ifdef __GLIBC__
    ::malloc_trim(0);
#endif
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

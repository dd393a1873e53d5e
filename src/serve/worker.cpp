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

// Progress of a job of `n` videos while its i-th remaining video `index` is made (`before` made already,
// `left_after` still to come after it): the videos made and this one's share; the ETA adds the videos after it at the
// time one takes.
ProgressFn job_progress(LineChannel& ch, const std::string& id, int index, int n, size_t i, double before,
                        double left_after, std::chrono::steady_clock::time_point t_job) {
  return [&ch, id, index, n, i, before, left_after, t_job](const GenerateProgress& p) {
    double eta = p.eta_s;
    if (eta >= 0 && left_after > 0) {
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_job).count();
      const double share = i + p.percent / 100.0;
      eta += share > 0.05 ? el / share * left_after : 0;
    }
    ch.send({{"type", "progress"},
             {"id", id},
             {"phase", p.phase},
             {"step", p.step},
             {"steps", p.steps},
             {"video_index", index},
             {"percent", (before + p.percent / 100.0) / n * 100.0},
             {"eta_s", p.phase == "done" && left_after > 0 ? -1.0 : eta}});
  };
}

// What one rank keeps between jobs and needs to run one.
struct WorkerState {
  const WorkerOptions& o;
  Comm& comm;
  LineChannel* ch;  // rank 0's channel to the supervisor; null on the other ranks
  Inbox& inbox;
  JobRunner& runner;
  std::map<std::string, SavedJob> saved;  // jobs suspended for others (this rank's states)
  std::unique_ptr<JobRunner> fake;        // x_debug_runner "fake" (tests only), made on first use
};

// The videos of job `cmd` still to make, one after the other; throws Suspended, Cancelled or the job's error.
nlohmann::json run_videos(WorkerState& w, const nlohmann::json& cmd, const std::string& id, SavedJob& from) {
  // x_debug_runner "fake" (tests, --debug-faults): this job on the fake runner, made on first use by every rank.
  if (cmd.value("runner", "") == "fake" && !w.fake) {
    RunnerOptions fo = w.o.runner;
    fo.fake_load_ms = 0;
    w.fake = make_fake_runner(fo, w.comm);
  }
  JobRunner& r = cmd.value("runner", "") == "fake" ? *w.fake : w.runner;
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
    ProgressFn progress;
    if (w.ch)
      progress = job_progress(*w.ch, id, index, n, i, made_before + static_cast<double>(i),
                              static_cast<double>(videos.size() - i - 1), t_job);
    RunHooks hooks;
    hooks.suspend = &w.inbox.suspend;
    if (from.state && from.index == index) hooks.resume = std::move(from.state);
    const int every = cmd.value("preview_every", 0);
    const std::string preview_out = cmd.value("preview_out", "");
    if (w.ch && every > 0 && !preview_out.empty()) {
      hooks.preview_every = every;
      LineChannel& ch = *w.ch;
      hooks.preview = [&ch, &id, index, preview_out](const PreviewPicture& p) {
        send_preview(ch, id, index, preview_out, p);
      };
    }
    // Between progress messages, "at work" every 10 s while rank 0 computes (serve/at_work.h).
    std::optional<AtWork> at_work;
    if (w.ch) at_work.emplace([&] { w.ch->send({{"type", "at_work"}, {"id", id}}); }, kAtWorkEveryS);
    try {
      result = r.run(req, videos[i].value("out", ""), progress, &w.inbox.cancel, hooks);
    } catch (const Suspended& e) {
      w.saved[id] = SavedJob{e.state, index};
      throw;
    }
    if (w.ch) w.ch->send({{"type", "video_done"}, {"id", id}, {"index", index}, {"result", result}});
  }
  return result;
}

// One job on this rank: the message that says how it ended.
nlohmann::json run_job(WorkerState& w, const nlohmann::json& cmd) {
  const std::string id = cmd.value("id", "");
  set_debug_fault(cmd.value("fault", ""));  // the job's test fault (x_debug_fault), read by the runners
  nlohmann::json done = {{"type", "done"}, {"id", id}};
  // The state a suspended job left, when every rank still has it.
  const bool resume = cmd.value("resume", false) && all_have(w.comm, w.saved, id);
  SavedJob from;
  if (auto it = w.saved.find(id); it != w.saved.end()) {
    if (resume) from = it->second;
    w.saved.erase(it);
  }
  try {
    done["result"] = run_videos(w, cmd, id, from);
    done["status"] = "completed";
  } catch (const Suspended& e) {
    done["status"] = "suspended";
    done["error"] = e.what();
  } catch (const Cancelled& e) {
    done["status"] = "cancelled";
    done["error"] = e.what();
  } catch (const std::exception& e) {
    done["status"] = "failed";
    done["error"] = w.comm.size() > 1 ? fmt::format("rank {} ({}): {}", w.comm.rank(), w.comm.host(), e.what())
                                      : std::string(e.what());
  }
  set_debug_fault("");
  // What the job freed goes back to the system: jobs of other sizes and modes would otherwise leave the heap at its
  // high-water mark for the group's life (the soak measures the workers' memory between jobs).
#ifdef __GLIBC__
  ::malloc_trim(0);
#endif
  return done;
}

}  // namespace

int run_worker(const WorkerOptions& o) {
  Comm& comm = world();
  std::unique_ptr<LineChannel> ch;
  Inbox inbox;
  if (comm.rank() == 0) {
    ch = std::make_unique<LineChannel>(unix_connect(o.control, 60));
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

  WorkerState w{o, comm, ch.get(), inbox, *runner, {}, {}};
  for (;;) {
    nlohmann::json cmd = broadcast_command(comm, comm.rank() == 0 ? inbox.next(o.tick_s) : nlohmann::json());
    const std::string type = cmd.value("type", "");
    if (type == "tick") continue;
    if (type == "shutdown") {
      spdlog::info("serve-worker: shutting down ({})", cmd.value("why", "asked by the supervisor"));
      break;
    }
    if (type == "forget") {
      w.saved.erase(cmd.value("id", ""));
      continue;
    }
    if (type != "job") continue;
    nlohmann::json done = run_job(w, cmd);
    if (ch) {
      inbox.finished();
      ch->send(done);
    }
  }
  if (ch) {
    ch->shutdown();
    reader.join();
  }
  return 0;
}

}  // namespace h3::serve

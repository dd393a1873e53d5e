// The supervisor (serve/supervisor.h): its life (the store, the control socket's folder, start and stop), the
// state it publishes, and the jobs' side of the group's messages: dispatch, progress, the end of a job. The group
// thread itself is in serve/supervisor_group.cpp, the API operations in serve/supervisor_api.cpp.
#include "serve/supervisor.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/json_limits.h"
#include "core/knobs.h"
#include "core/log.h"
#include "serve/channel.h"

namespace h3::serve {

namespace fs = std::filesystem;

namespace {

// The integer fields `keys` of `from` (0 where absent) added to `to`.
void copy_ints(nlohmann::json& to, const nlohmann::json& from, std::initializer_list<const char*> keys) {
  for (const char* k : keys) to[k] = from.value(k, 0);
}

}  // namespace

const char* Supervisor::state_name(State s) {
  static constexpr const char* kNames[] = {"starting", "loading", "ready", "busy", "restarting", "stopped"};  // State's
  const auto i = static_cast<size_t>(s);
  return i < std::size(kNames) ? kNames[i] : "?";
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
    try {
      return parse_json_bounded(*v, std::string("the store's ") + key, kJsonMaxDepth, false);
    } catch (const Error& e) {
      spdlog::warn("serve: {}; ignored", e.what());
      return fallback;
    }
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
  // A job suspended for one of higher priority kept its phase: the rank group resumes it from the state it kept
  // (a group that lost it, restarted since, starts it afresh).
  const bool resume = !next->phase.empty();
  if (!store_->mark_running(next->id)) return;
  {
    std::lock_guard lock(mu_);
    running_ = next->id;
    running_priority_ = next->priority;
    suspend_asked_ = false;
  }
  // The videos still to make, in order (a resumed job's finished ones stay as they are).
  nlohmann::json videos = nlohmann::json::array();
  const int n = next->n();
  for (int k = 0; k < n; ++k) {
    const nlohmann::json v = next->videos.is_array() && k < static_cast<int>(next->videos.size())
                                 ? next->videos[k]
                                 : nlohmann::json{{"index", k}, {"seed", next->resolved.value("seed", uint64_t{0})}};
    if (next->video_ready(k)) continue;
    videos.push_back({{"index", k}, {"seed", v.value("seed", uint64_t{0})}, {"out", store_->output_path(next->id, k)}});
  }
  nlohmann::json job = {{"type", "job"},
                        {"id", next->id},
                        {"request", next->resolved},
                        {"out", store_->output_path(next->id)},
                        {"videos", videos},
                        {"n", n},
                        {"resume", resume},
                        {"preview_every", o_.preview_every},
                        {"preview_out", store_->preview_path(next->id)}};
  if (o_.debug_faults && next->request.contains("x_debug_fault") && next->request["x_debug_fault"].is_string())
    job["fault"] = next->request["x_debug_fault"];
  if (o_.debug_faults && next->request.contains("x_debug_runner") && next->request["x_debug_runner"].is_string())
    job["runner"] = next->request["x_debug_runner"];
  last_word_ = steady_now();
  set_state(State::busy);
  publish_job(next->id);
  spdlog::info("serve: {} job {}", resume ? "resuming" : "running", next->id);
  channel_->send(job);
}

// Why a suspend at a step boundary and not only a queue order: a 768p job takes minutes, so a job of higher priority
// ordered first would still wait for the whole of the running one. The rank group stops the running job at its next
// denoising step boundary (one DiT call at most, the same word that carries a cancel), keeps its state in memory
// (prompt embeddings and rows: tens of MB at 768p) and runs the other one; the suspended job resumes where it stopped
// and ends bitwise as if it had never stopped. Inside the encode, decode or write there is no step boundary to stop
// at: the other job waits for the phase's end (seconds). At most kMaxSuspended states are kept; beyond that the queue
// order alone decides.
void Supervisor::maybe_preempt() {
  constexpr int64_t kMaxSuspended = 8;
  std::string id;
  int priority = 0;
  {
    std::lock_guard lock(mu_);
    if (running_.empty() || suspend_asked_) return;
    id = running_;
    priority = running_priority_;
  }
  const std::optional<int> top = store_->top_queued_priority();
  if (!top || *top <= priority) return;
  if (store_->count_suspended() >= kMaxSuspended) return;
  {
    std::lock_guard lock(mu_);
    if (running_ != id) return;
    suspend_asked_ = true;
  }
  spdlog::info("serve: job {} (priority {}) stops at its next step for a job of priority {}", id, priority, *top);
  post({{"type", "suspend"}, {"id", id}});
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
  } else if (type == "video_done") {
    on_video_done(id, m);
  } else if (type == "preview") {
    on_preview(id, m);
  } else if (type == "done") {
    on_job_end(id, m);
  }
}

// One of the job's videos is made: recorded (downloadable from now on) and published.
void Supervisor::on_video_done(const std::string& id, const nlohmann::json& m) {
  auto rec = store_->get(id);
  if (!rec) return;
  const int index = m.value("index", -1);
  nlohmann::json videos = rec->videos;
  if (!videos.is_array() || index < 0 || index >= static_cast<int>(videos.size())) return;
  std::error_code ec;
  const auto bytes = static_cast<int64_t>(fs::file_size(store_->output_path(id, index), ec));
  videos[index]["status"] = ec ? kFailed : kCompleted;
  videos[index]["bytes"] = ec ? 0 : bytes;
  if (m.contains("result") && m["result"].is_object()) {
    const nlohmann::json& res = m["result"];
    if (res.contains("time_to_mp4_s")) videos[index]["time_to_mp4_s"] = res["time_to_mp4_s"];
  }
  store_->update_videos(id, videos);
  publish_job(id);
}

// A preview is in the store (the rank group wrote it at preview_path): an event says where, with its step.
void Supervisor::on_preview(const std::string& id, const nlohmann::json& m) {
  nlohmann::json e = {{"id", id},
                      {"object", "video.preview"},
                      {"url", "/v1/videos/" + id + "/content?variant=preview"},
                      {"video_index", m.value("index", 0)},
                      {"created_at", static_cast<int64_t>(unix_now())}};
  copy_ints(e, m, {"step", "steps", "frame", "width", "height"});
  events_.publish("preview", id, std::move(e));
}

void Supervisor::on_job_end(const std::string& id, const nlohmann::json& m) {
  const std::string status = m.value("status", "failed");
  if (status == "suspended") {
    {
      std::lock_guard lock(mu_);
      running_.clear();
      suspend_asked_ = false;
    }
    store_->suspend(id);
    spdlog::info("serve: job {} suspended ({}); it resumes when its turn comes", id, m.value("error", ""));
    publish_job(id);
    set_state(State::ready);
    return;
  }
  int64_t bytes = 0;
  std::string error = m.value("error", "");
  std::string st = status;
  std::optional<JobRecord> rec;
  try {
    rec = store_->get(id);
  } catch (const std::exception&) {
  }
  if (status == "completed") {
    const auto& res = m.contains("result") ? m["result"] : nlohmann::json();
    const bool no_writer = res.is_object() && res.value("wrote_mp4", true) == false;
    // Every video must be in the store (the first one's size is the job's `bytes`).
    const int n = rec ? rec->n() : 1;
    for (int k = 0; k < n && st == kCompleted; ++k) {
      std::error_code ec;
      const auto size = static_cast<int64_t>(fs::file_size(store_->output_path(id, k), ec));
      if (k == 0) bytes = ec ? 0 : size;
      if (ec && !no_writer) {
        st = kFailed;
        error = n > 1 ? fmt::format("the rank group reported success but wrote no file for video {}", k)
                      : "the rank group reported success but wrote no output file";
      }
    }
    if (no_writer) bytes = 0;  // a build without the MP4 writer: latents only, no content to serve
  }
  const std::string code = st == kCompleted ? "" : st == kCancelled ? "cancelled" : "generation_failed";
  if (st != kCompleted) store_->remove_partials(id);
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
                      {"model_calls", calls}};
  copy_ints(m, p, {"width", "height", "frames", "latent_frames", "latent_h", "latent_w"});
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

// The supervisor's API operations: request validation and resolution, job objects, cancel/delete, health,
// models and the Prometheus metrics text. Everything here runs on HTTP threads.
#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/dtype.h"
#include "core/log.h"
#include "pipeline/generator.h"
#include "serve/openai_compat.h"
#include "serve/probe.h"
#include "serve/scrub.h"
#include "serve/supervisor.h"
#include "serve/uploads.h"

namespace h3::serve {

namespace {

// Fields of POST /v1/videos beyond GenerateRequest's own (docs/api.md lists them all).
constexpr size_t kMaxPrompt = 16384;  // bytes

ApiError bad(const std::string& message) {
  return {400, "invalid_request", message};
}

// A JSON integer within [lo, hi] (no float, no string; hi >= 0).
bool integer_in(const nlohmann::json& v, int64_t lo, int64_t hi) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    return u <= static_cast<uint64_t>(hi) && static_cast<int64_t>(u) >= lo;
  }
  return v.is_number_integer() && v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
}

// Job field `k` as an integer, `fallback` when absent (read_fields checked it).
int int_field(const nlohmann::json& body, const char* k, int fallback) {
  return body.contains(k) && body[k].is_number_integer() ? static_cast<int>(body[k].get<int64_t>()) : fallback;
}

// "1280x720" -> width, height.
std::pair<int64_t, int64_t> parse_size(const std::string& s) {
  const auto x = s.find('x');
  auto digits = [](const std::string& t) {
    return !t.empty() && t.size() <= 5 && t.find_first_not_of("0123456789") == std::string::npos;
  };
  if (x == std::string::npos || !digits(s.substr(0, x)) || !digits(s.substr(x + 1)))
    throw bad("'size' must look like \"1344x768\" (WIDTHxHEIGHT in pixels)");
  return {std::stoll(s.substr(0, x)), std::stoll(s.substr(x + 1))};
}

// "loras": [{"name": FILE, "strength": S}] -> the engine's [{"path": lora_dir/FILE, "strength": S}]. Names
// are plain file names inside the server's --lora-dir: no client path is ever opened.
nlohmann::json resolve_loras(const nlohmann::json& v, const std::string& lora_dir) {
  namespace fs = std::filesystem;
  if (!v.is_array()) throw bad("'loras' must be a list of {\"name\": FILE, \"strength\": NUMBER} objects");
  if (lora_dir.empty())
    throw bad("this server takes no LoRAs (start it with --lora-dir DIR to let jobs name the files in DIR)");
  if (v.size() > 16) throw bad("at most 16 LoRAs per job");
  nlohmann::json out = nlohmann::json::array();
  for (const auto& e : v) {
    if (e.is_object() && e.contains("path"))
      throw bad(
          "'loras' entries name a file of the server's --lora-dir ('name'); the server never opens files "
          "named by the client");
    if (!e.is_object() || !e.contains("name"))
      throw bad("each entry of 'loras' must be {\"name\": FILE, \"strength\": NUMBER} (strength optional, 1)");
    for (auto it = e.begin(); it != e.end(); ++it)
      if (it.key() != "name" && it.key() != "strength")
        throw bad(fmt::format("unknown field '{}' in a 'loras' entry (name, strength)", it.key().substr(0, 100)));
    if (!e["name"].is_string()) throw bad("'loras[].name' must be a string");
    const std::string name = e["name"].get<std::string>();
    if (name.empty() || name.size() > 255 || name.find('/') != std::string::npos ||
        name.find('\\') != std::string::npos || name.front() == '.' || !name.ends_with(".safetensors"))
      throw bad(fmt::format("LoRA name '{}' must be a plain file name ending in .safetensors (no folders)",
                            name.substr(0, 100)));
    const fs::path path = fs::path(lora_dir) / name;
    if (!fs::is_regular_file(path))
      throw bad(fmt::format("no LoRA '{}' in the server's LoRA folder (GET /v1/models lists them)", name));
    nlohmann::json l = {{"path", path.string()}, {"strength", 1.0}};
    if (e.contains("strength")) {
      if (!e["strength"].is_number()) throw bad("'loras[].strength' must be a number");
      l["strength"] = e["strength"];
    }
    out.push_back(l);
  }
  return out;
}

// The request's fields, each checked and sorted: `gen` gets what GenerateRequest reads, `accepted` what the job
// record keeps. Throws ApiError naming the first field that is wrong.
void read_fields(const nlohmann::json& body, const ServeOptions& o, nlohmann::json& gen, nlohmann::json& accepted) {
  static const std::vector<std::string> passthrough = {
      "prompt", "width", "height", "aspect", "frames", "seconds", "steps", "seed", "shift", "audio_shift", "precision"};
  for (auto it = body.begin(); it != body.end(); ++it) {
    const std::string& k = it.key();
    const nlohmann::json& v = it.value();
    if (k == "model") {
      if (!v.is_string()) throw bad("'model' must be a string");
      if (v.get<std::string>() != o.model_id)
        throw ApiError{400, "model_not_found",
                       fmt::format("model '{}' is not served here; this server serves '{}'",
                                   v.get<std::string>().substr(0, 200), o.model_id)};
    } else if (k == "size") {
      if (!v.is_string()) throw bad("'size' must be a string like \"1344x768\"");
      auto [w, h] = parse_size(v.get<std::string>());
      if (body.contains("width") || body.contains("height")) throw bad("give 'size' or 'width'/'height', not both");
      gen["width"] = w;
      gen["height"] = h;
    } else if (k == "seconds") {
      // The OpenAI API sends seconds as a string ("8"); numbers are accepted too.
      if (v.is_string()) {
        const std::string t = v.get<std::string>();
        char* end = nullptr;
        const double d = t.empty() || t.size() > 16 ? NAN : std::strtod(t.c_str(), &end);
        if (std::isnan(d) || !end || *end != '\0') throw bad("'seconds' must be a number or a numeric string");
        gen["seconds"] = d;
      } else if (v.is_number()) {
        gen["seconds"] = v;
      } else {
        throw bad("'seconds' must be a number or a numeric string");
      }
      if (body.contains("frames")) throw bad("give 'seconds' or 'frames', not both");
    } else if (k == "num_inference_steps") {
      if (body.contains("steps")) throw bad("give 'steps' or 'num_inference_steps', not both");
      gen["steps"] = v;
    } else if (k == "x_debug_fault") {
      if (!o.debug_faults)
        throw bad(
            "unknown field 'x_debug_fault' (a test hook; the server was not started with "
            "--debug-faults)");
      if (!v.is_string()) throw bad("'x_debug_fault' must be a string RANK:STEP:kill|stall");
      try {
        FaultSpec::parse(v.get<std::string>());
      } catch (const std::exception& e) {
        throw bad(e.what());
      }
    } else if (k == "x_debug_runner") {
      if (!o.debug_faults)
        throw bad(
            "unknown field 'x_debug_runner' (a test hook; the server was not started with "
            "--debug-faults)");
      if (!v.is_string() || v.get<std::string>() != "fake")
        throw bad("'x_debug_runner' must be \"fake\" (this job runs on the fake runner; tests only)");
    } else if (k == "n") {
      if (!integer_in(v, 1, kMaxVideos))
        throw bad(fmt::format("'n' must be an integer 1 .. {}: the videos this request makes, each its own seed",
                              kMaxVideos));
    } else if (k == "priority") {
      if (!integer_in(v, 0, kMaxPriority))
        throw bad(
            fmt::format("'priority' must be an integer 0 .. {} (higher runs first; default 0, first come first "
                        "served)",
                        kMaxPriority));
    } else if (k == "loras") {
      gen["loras"] = resolve_loras(v, o.lora_dir);
    } else if (is_media_field(k)) {
      continue;  // stored below (serve/uploads.h); the record keeps a summary, not the data
    } else if (std::find(passthrough.begin(), passthrough.end(), k) != passthrough.end()) {
      gen[k] = v;
    } else {
      throw bad(fmt::format("unknown field '{}'", k.substr(0, 100)));
    }
    accepted[k] = v;
  }
}

// The prompt and the sizes, bounded here so that no product of them can overflow further on.
void check_bounds(const nlohmann::json& body, const nlohmann::json& gen) {
  if (!body.contains("prompt")) throw bad("'prompt' is required");
  if (!body["prompt"].is_string()) throw bad("'prompt' must be a string");
  if (body["prompt"].get<std::string>().size() > kMaxPrompt)
    throw bad(fmt::format("'prompt' is longer than {} bytes", kMaxPrompt));
  // Sizes are bounded here too, so no product of them can overflow further on.
  for (const char* k : {"width", "height", "frames"})
    if (gen.contains(k) && gen[k].is_number_integer() &&
        (gen[k].is_number_unsigned() ? gen[k].get<uint64_t>() > 100000 : std::llabs(gen[k].get<int64_t>()) > 100000))
      throw bad(fmt::format("'{}' is out of range", k));
  // "steps" must fit an int before the pipeline sees it.
  if (gen.contains("steps") && gen["steps"].is_number_integer() &&
      (gen["steps"].is_number_unsigned() ? gen["steps"].get<uint64_t>() > 100000
                                         : std::llabs(gen["steps"].get<int64_t>()) > 100000))
    throw bad("'steps' is out of range");
}

}  // namespace

JobRecord Supervisor::submit(const nlohmann::json& request) {
  if (!request.is_object()) throw bad("the body must be a JSON object");
  nlohmann::json body = request;
  input_reference_to_keyframe(body);  // the OpenAI SDK's field (serve/openai_compat.h)
  nlohmann::json gen = nlohmann::json::object();
  nlohmann::json accepted = nlohmann::json::object();
  read_fields(body, o_, gen, accepted);
  check_bounds(body, gen);
  // FP8 GEMMs are a GPU path: a CPU server refuses them here instead of accepting a job that fails when it runs.
  if (o_.device != "cuda" && gen.contains("precision") && gen["precision"] == "fp8")
    throw bad("precision 'fp8' needs a GPU server (--device cuda); this server runs on the CPU: f64, f32 or bf16");
  nlohmann::json limits;
  {
    std::lock_guard lock(mu_);
    limits = limits_;
  }
  if (!limits.is_object() || limits.empty())
    throw ApiError{503, "loading",
                   "the models are still loading for the first time, so the request limits are not "
                   "known yet; retry in a few seconds"};
  const std::vector<std::string> mapped = map_openai_geometry(body, gen, limits);
  const std::string upload_dir = store_uploads(body, gen, accepted, o_.store_dir);
  // Uploads are probed in a resource-limited child process (serve/probe.h), never decoded here.
  MediaScanner scan;
  if (!o_.self_exe.empty())
    scan = [this](const std::string& path, int64_t frames, int64_t samples) {
      return probe_media(o_.self_exe, path, frames, samples);
    };
  nlohmann::json resolved;
  try {
    resolved = resolve(GenerateRequest::from_json(gen), limits_from_json(limits), scan).to_json();
    for (const auto& note : mapped) resolved["notes"].push_back(note);
  } catch (const nlohmann::json::exception& e) {
    remove_uploads(upload_dir);
    throw bad(scrub(std::string("request: ") + e.what()));
  } catch (const std::exception& e) {
    remove_uploads(upload_dir);
    const std::string what = scrub(e.what());
    std::string hint;
    if (body.contains("size") && (what.find("width") != std::string::npos || what.find("height") != std::string::npos ||
                                  what.find("size") != std::string::npos)) {
      hint = " ('size' takes the OpenAI sizes";
      for (const auto& z : openai_sizes()) hint += " " + z;
      hint += " too, mapped to the nearest canvas)";
    }
    throw bad(what + hint);
  }
  // `n` videos: the resolved seed for the first, then seed + 1, ... (wrapping at 2^64): video k is what a job of
  // seed + k alone makes.
  const int n = int_field(body, "n", 1), priority = int_field(body, "priority", 0);
  nlohmann::json videos = nlohmann::json::array();
  const uint64_t seed = resolved.value("seed", uint64_t{0});
  for (int k = 0; k < n; ++k)
    videos.push_back({{"index", k}, {"seed", seed + static_cast<uint64_t>(k)}, {"status", kQueued}, {"bytes", 0}});
  std::optional<JobRecord> rec;
  try {
    rec = store_->insert(accepted, resolved, o_.max_queue, priority, videos);
  } catch (const std::exception& e) {
    remove_uploads(upload_dir);
    spdlog::error("serve: cannot queue a job: {}", e.what());
    throw ApiError{503, "store_unavailable",
                   "the server cannot write its job store now (is its disk full?); retry later"};
  }
  if (!rec) {
    remove_uploads(upload_dir);
    throw ApiError{429, "queue_full",
                   fmt::format("the queue is full ({} jobs waiting, --max-queue); retry later", o_.max_queue)};
  }
  ++jobs_submitted_;
  spdlog::info("serve: queued job {}", rec->id);
  events_.publish("video", rec->id, job_json(*rec));
  wake();
  return *rec;
}

JobRecord Supervisor::get(const std::string& id) {
  auto r = valid_job_id(id) ? store_->get(id) : std::nullopt;
  if (!r) throw ApiError{404, "not_found", "no video with this id"};
  std::lock_guard lock(mu_);
  show_pending(*r);
  return *r;
}

void Supervisor::show_pending(JobRecord& r) const {
  // An end the store could not record yet (disk full) is shown as it happened.
  if (auto p = pending_.find(r.id); p != pending_.end()) {
    r.status = p->second.status;
    r.error_code = p->second.code;
    r.error = p->second.message;
    r.output_bytes = p->second.bytes;
    r.result = p->second.result;
    r.finished_at = unix_now();
  }
}

std::vector<JobRecord> Supervisor::list(int64_t limit, std::optional<int64_t> after_seq, bool descending,
                                        const std::string& status) {
  std::vector<JobRecord> rows = store_->list(limit, after_seq, descending, status);
  std::lock_guard lock(mu_);
  if (pending_.empty()) return rows;
  // The list shows what get() shows; a row the filter took for its stored status, now another, is left out.
  for (JobRecord& r : rows) show_pending(r);
  if (!status.empty())
    rows.erase(std::remove_if(rows.begin(), rows.end(), [&](const JobRecord& r) { return r.status != status; }),
               rows.end());
  return rows;
}

JobRecord Supervisor::cancel(const std::string& id) {
  JobRecord r = get(id);
  if (r.status == kQueued && store_->cancel_queued(id)) {
    ++jobs_cancelled_;
    if (!r.phase.empty()) post({{"type", "forget"}, {"id", id}});  // a suspended job: the ranks drop its state
    publish_job(id);
    return get(id);
  }
  if (r.status == kRunning || (r.status == kQueued && get(id).status == kRunning)) {
    if (store_->request_cancel(id)) {
      post({{"type", "cancel"}, {"id", id}});
      publish_job(id);
    }
    return get(id);
  }
  r = get(id);
  if (r.status == kCancelled) return r;
  throw ApiError{409, "not_cancellable", fmt::format("the video is already {}", r.status)};
}

void Supervisor::remove(const std::string& id) {
  JobRecord r = get(id);
  if (r.status == kRunning)
    throw ApiError{409, "running", "the video is being generated; cancel it first (POST /v1/videos/{id}/cancel)"};
  if (!store_->remove(id)) throw ApiError{409, "running", "the video started running; cancel it first"};
  if (r.status == kQueued && !r.phase.empty()) post({{"type", "forget"}, {"id", id}});
  remove_job_uploads(r.resolved, o_.store_dir);
  events_.publish("video", id, {{"id", id}, {"object", "video.deleted"}, {"deleted", true}});
}

std::string Supervisor::scrub(std::string s) const {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, std::string>> known;
  auto add = [&](const std::string& path, const std::string& name) {
    if (path.empty()) return;
    std::error_code ec;
    for (std::string p :
         {path, fs::absolute(path, ec).lexically_normal().string(), fs::weakly_canonical(path, ec).string()}) {
      while (p.size() > 1 && p.back() == '/') p.pop_back();
      if (p.size() > 1) known.emplace_back(p, name);
    }
  };
  add(o_.store_dir, "<store>");
  add(o_.lora_dir, "<lora-dir>");
  add(run_dir_, "<run>");
  const ModelPaths& m = o_.runner.paths;
  for (const auto* p : {&m.model_dir, &m.dit, &m.video_vae, &m.audio_vae, &m.text_encoder, &m.tokenizer})
    if (p->find('/') != std::string::npos) add(*p, "<model>");
  // Longest first, so a folder inside another is named by the inner one.
  std::stable_sort(known.begin(), known.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  return scrub_paths(s, known);
}

nlohmann::json Supervisor::job_json(const JobRecord& r) {
  auto time_or_null = [](double t) { return t > 0 ? nlohmann::json(static_cast<int64_t>(t)) : nlohmann::json(); };
  const auto& res = client_parameters(r.resolved);
  nlohmann::json j = {
      {"id", r.id},
      {"object", "video"},
      {"model", o_.model_id},
      {"status", r.status},
      {"phase", r.phase.empty() ? nlohmann::json() : nlohmann::json(r.phase)},
      {"progress", std::round(r.progress * 10) / 10},
      {"step", r.step},
      {"steps", r.steps},
      {"eta_seconds",
       r.status == kRunning && r.eta_s >= 0 ? nlohmann::json(std::round(r.eta_s * 10) / 10) : nlohmann::json()},
      {"created_at", time_or_null(r.created_at)},
      {"started_at", time_or_null(r.started_at)},
      {"completed_at", time_or_null(r.finished_at)},
      {"prompt", res.value("prompt", "")},
      {"size", fmt::format("{}x{}", res.value("width", 0), res.value("height", 0))},
      {"seconds", fmt::format("{:g}", res.value("seconds", 0.0))},
      {"request", r.request.is_object() ? r.request : nlohmann::json::object()},
      {"parameters", res},
      {"attempts", r.attempts},
      // Fields of the OpenAI video object this server has no use for (no expiry, no remix).
      {"expires_at", nullptr},
      {"remixed_from_video_id", nullptr},
      {"cancel_requested", r.cancel_requested},
      {"error", r.error.empty() && r.error_code.empty()
                    ? nlohmann::json()
                    : nlohmann::json{{"code", r.error_code}, {"message", scrub(r.error)}}},
  };
  j["n"] = r.n();
  j["priority"] = r.priority;
  j["preemptions"] = r.preemptions;
  // Each video: its seed, whether it is made, and where (downloadable as soon as it is, whatever the others do).
  nlohmann::json videos = nlohmann::json::array();
  for (int k = 0; k < r.n(); ++k) {
    const nlohmann::json e = r.videos.is_array() && k < static_cast<int>(r.videos.size()) && r.videos[k].is_object()
                                 ? r.videos[k]
                                 : nlohmann::json::object();
    const bool ready = r.video_ready(k);
    const std::string st = ready ? kCompleted : e.value("status", r.status == kCompleted ? kCompleted : kQueued);
    nlohmann::json v = {{"index", k},
                        {"seed", e.contains("seed") ? e["seed"] : res.value("seed", nlohmann::json())},
                        {"status", st == kQueued && r.status != kQueued && r.status != kRunning ? r.status : st}};
    if (ready) {
      const std::string q = k == 0 ? "" : fmt::format("&index={}", k);
      v["content_url"] = "/v1/videos/" + r.id + "/content" + (k == 0 ? "" : "?index=" + std::to_string(k));
      v["thumbnail_url"] = "/v1/videos/" + r.id + "/content?variant=thumbnail" + q;
      v["bytes"] = e.value("bytes", r.output_bytes);
    }
    videos.push_back(std::move(v));
  }
  j["videos"] = std::move(videos);
  std::error_code ec;
  if (std::filesystem::is_regular_file(store_->preview_path(r.id), ec))
    j["preview_url"] = "/v1/videos/" + r.id + "/content?variant=preview";
  if (r.status == kQueued) {
    j["queue_position"] = store_->queue_position(r);
    // When it starts: what the running job still needs, then each job ahead of it, from the last measured job.
    std::optional<double> wait = 0;
    std::string running;
    {
      std::lock_guard lock(mu_);
      running = running_;
    }
    if (!running.empty())
      if (auto rr = store_->get(running)) {
        if (rr->eta_s >= 0)
          *wait += rr->eta_s;
        else if (auto e = estimate_remaining_s(*rr))
          *wait += *e;
        else
          wait.reset();
      }
    if (wait)
      for (const JobRecord& a : store_->queued_ahead(r)) {
        const std::optional<double> e = estimate_remaining_s(a);
        if (!e) {
          wait.reset();
          break;
        }
        *wait += *e;
      }
    j["queue_eta_seconds"] = wait ? nlohmann::json(std::round(*wait * 10) / 10) : nlohmann::json();
  }
  if (const auto e = estimate_remaining_s(r); e && !is_terminal(r.status))
    j["estimate_seconds"] = std::round(*e * 10) / 10;
  if (r.status == kCompleted && r.output_bytes > 0) {
    j["content_url"] = "/v1/videos/" + r.id + "/content";
    j["thumbnail_url"] = "/v1/videos/" + r.id + "/content?variant=thumbnail";
    j["bytes"] = r.output_bytes;
    j["result"] = r.result;
  }
  return j;
}

// The last measured job (record_timing) scaled as the web page scales it: the DiT's time by video tokens, the rest
// by pixels x frames; times the videos not yet made, less what a started job has done of the current one.
std::optional<double> Supervisor::estimate_remaining_s(const JobRecord& r) {
  nlohmann::json ms;
  {
    std::lock_guard lock(mu_);
    ms = measured_;
  }
  const nlohmann::json& p = r.resolved;
  if (!ms.is_object() || !p.is_object()) return std::nullopt;
  auto num = [](const nlohmann::json& j, const char* k) {
    return j.contains(k) && j[k].is_number() ? j[k].get<double>() : 0.0;
  };
  const double tok = num(p, "latent_frames") * num(p, "latent_h") * num(p, "latent_w");
  const double tok_m = num(ms, "latent_frames") * num(ms, "latent_h") * num(ms, "latent_w");
  const double px = num(p, "width") * num(p, "height") * num(p, "frames");
  const double px_m = num(ms, "width") * num(ms, "height") * num(ms, "frames");
  if (tok <= 0 || tok_m <= 0 || px <= 0 || px_m <= 0) return std::nullopt;
  const double one =
      num(p, "model_calls") * num(ms, "seconds_per_call") * tok / tok_m + num(ms, "other_seconds") * px / px_m;
  int left = 0;
  for (int k = 0; k < r.n(); ++k) left += r.video_ready(k) ? 0 : 1;
  // A job that was started (and suspended) has made part of its current video: its progress says how much.
  const double done_of_job = std::clamp(r.progress / 100.0, 0.0, 1.0) * r.n();
  const double done_of_current = std::max(0.0, done_of_job - (r.n() - left));
  return std::max(0.0, one * (left - std::min(done_of_current, 1.0)));
}

bool Supervisor::ready() {
  std::lock_guard lock(mu_);
  return state_ == State::ready || state_ == State::busy;
}

// The resolved parameters as a client sees them: stored uploads by their place in the store, LoRAs by name,
// notes without server paths.
nlohmann::json Supervisor::client_parameters(const nlohmann::json& resolved) const {
  if (!resolved.is_object()) return nlohmann::json::object();
  nlohmann::json p = resolved;
  namespace fs = std::filesystem;
  if (p.contains("media") && p["media"].is_array())
    for (auto& m : p["media"])
      if (m.is_object() && m.contains("path") && m["path"].is_string()) {
        const fs::path path(m["path"].get<std::string>());
        m["path"] = (fs::path("uploads") / path.parent_path().filename() / path.filename()).string();
      }
  if (p.contains("loras") && p["loras"].is_array())
    for (auto& l : p["loras"])
      if (l.is_object() && l.contains("path") && l["path"].is_string()) {
        l["name"] = fs::path(l["path"].get<std::string>()).filename().string();
        l.erase("path");
      }
  if (p.contains("notes") && p["notes"].is_array())
    for (auto& n : p["notes"])
      if (n.is_string()) n = scrub(n.get<std::string>());
  return p;
}

nlohmann::json Supervisor::health() {
  std::lock_guard lock(mu_);
  nlohmann::json j = {{"status", state_ == State::ready || state_ == State::busy ? "ok" : "unavailable"},
                      {"group", state_name(state_)},
                      {"ranks", o_.ranks},
                      {"generation", generation_},
                      {"restarts", restarts_},
                      {"running", running_.empty() ? nlohmann::json() : nlohmann::json(running_)},
                      {"load_seconds", last_load_s_},
                      {"last_error", last_error_.empty() ? nlohmann::json() : nlohmann::json(scrub(last_error_))}};
  return j;
}

nlohmann::json Supervisor::models() {
  // The LoRA files jobs may name (the folder is read each time: files may be added while the server runs).
  nlohmann::json loras = nlohmann::json::array();
  if (!o_.lora_dir.empty()) {
    std::error_code ec;
    std::vector<std::string> names;
    for (const auto& e : std::filesystem::directory_iterator(o_.lora_dir, ec))
      if (e.is_regular_file() && e.path().extension() == ".safetensors") names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    for (const auto& n : names) loras.push_back(n);
  }
  // What the web page starts from on this device: small and short on CPUs, the released 768p on a GPU.
  const bool gpu = o_.device == "cuda";
  const nlohmann::json defaults = {{"size", gpu ? "1344x768" : "320x192"}, {"seconds", 5}, {"steps", gpu ? 50 : 8}};
  const nlohmann::json presets = nlohmann::json::array(
      {{{"name", "draft"}, {"steps", 8}}, {{"name", "standard"}, {"steps", 25}}, {{"name", "full"}, {"steps", 50}}});
  std::lock_guard lock(mu_);
  return {
      {"object", "list"},
      {"data",
       {{{"id", o_.model_id},
         {"object", "model"},
         {"owned_by", "h3-engine"},
         {"runner", o_.runner.kind},
         {"ranks", o_.ranks},
         {"device", o_.device},
         // The DiT precision jobs run at (the device's default unless --precision names one).
         {"precision", std::string(precision_name(
                           default_generate_options(gpu ? Device::cuda : Device::cpu, o_.runner.precision).precision))},
         {"components", models_},
         {"procedural", !notice_.empty()},
         {"notice", notice_.empty() ? nlohmann::json() : nlohmann::json(notice_)},
         {"loras", loras},
         {"limits", limits_},
         {"max_body_bytes", o_.http.max_body},
         {"max_upload_bytes", kMaxUploadBytes},
         {"defaults", defaults},
         {"presets", presets},
         {"measured", measured_}}}}};
}

std::string Supervisor::metrics() {
  const int64_t queued = store_->count(kQueued);
  std::string group;
  int restarts;
  double secs;
  bool busy;
  {
    std::lock_guard lock(mu_);
    group = state_name(state_);
    restarts = restarts_;
    secs = job_seconds_sum_;
    busy = !running_.empty();
  }
  std::string s;
  auto metric = [&](const char* name, const char* type, const char* help, const std::string& value,
                    const std::string& labels = "") {
    s += fmt::format("# HELP {} {}\n# TYPE {} {}\n{}{} {}\n", name, help, name, type, name, labels, value);
  };
  metric("h3_up", "gauge", "1 when the rank group is ready", group == "ready" || group == "busy" ? "1" : "0");
  metric("h3_queue_length", "gauge", "jobs waiting", std::to_string(queued));
  metric("h3_jobs_running", "gauge", "jobs being generated (0 or 1)", busy ? "1" : "0");
  metric("h3_jobs_submitted_total", "counter", "jobs accepted since start", std::to_string(jobs_submitted_.load()));
  s += "# HELP h3_jobs_finished_total jobs finished since start, by status\n# TYPE h3_jobs_finished_total "
       "counter\n";
  s += fmt::format("h3_jobs_finished_total{{status=\"completed\"}} {}\n", jobs_completed_.load());
  s += fmt::format("h3_jobs_finished_total{{status=\"failed\"}} {}\n", jobs_failed_.load());
  s += fmt::format("h3_jobs_finished_total{{status=\"cancelled\"}} {}\n", jobs_cancelled_.load());
  metric("h3_job_seconds_total", "counter", "wall time spent running jobs", fmt::format("{:.3f}", secs));
  metric("h3_group_restarts_total", "counter", "times the rank group was recreated", std::to_string(restarts));
  metric("h3_group_ranks", "gauge", "ranks in the group", std::to_string(o_.ranks));
  metric("h3_http_requests_total", "counter", "HTTP requests answered", std::to_string(http_requests.load()));
  metric("h3_http_client_errors_total", "counter", "4xx answers", std::to_string(http_4xx.load()));
  metric("h3_http_server_errors_total", "counter", "5xx answers", std::to_string(http_5xx.load()));
  metric("h3_sse_streams", "gauge", "open server-sent-event streams", std::to_string(sse_streams.load()));
  return s;
}

}  // namespace h3::serve

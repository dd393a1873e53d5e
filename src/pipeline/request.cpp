// Request parsing and resolution (pipeline/request.h). The Generator itself lives in
// generator.cpp.
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <random>
#include <set>

#include "core/json.h"
#include "model/dit/lora.h"
#include "model/qwen3vl/tokenizer.h"
#include "pipeline/geometry.h"
#include "pipeline/request.h"
#include "pipeline/sampling.h"

namespace h3 {

namespace {

using json = nlohmann::json;

const char* json_kind(const json& v) {
  return v.type_name();
}

int64_t get_int(const json& v, const char* field) {
  if (v.is_number_integer() || v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9e15) return static_cast<int64_t>(d);
  }
  fail("request field \"{}\" must be an integer, got {} {}", field, json_kind(v), v.dump());
}

double get_number(const json& v, const char* field) {
  if (!v.is_number()) fail("request field \"{}\" must be a number, got {} {}", field, json_kind(v), v.dump());
  return v.get<double>();
}

std::string get_string(const json& v, const char* field) {
  if (!v.is_string()) fail("request field \"{}\" must be a string, got {} {}", field, json_kind(v), v.dump());
  return v.get<std::string>();
}

// "16:9", "16x9", "1.777" -> (w, h).
std::pair<double, double> parse_aspect(const std::string& s) {
  const auto sep = s.find_first_of(":x/");
  try {
    size_t used = 0;
    if (sep == std::string::npos) {
      const double r = std::stod(s, &used);
      if (used == s.size() && std::isfinite(r) && r > 0) return {r, 1.0};
    } else {
      const std::string a = s.substr(0, sep), b = s.substr(sep + 1);
      size_t ua = 0, ub = 0;
      const double w = std::stod(a, &ua), h = std::stod(b, &ub);
      if (ua == a.size() && ub == b.size() && std::isfinite(w) && std::isfinite(h) && w > 0 && h > 0) return {w, h};
    }
  } catch (const std::exception&) {
  }
  fail(
      "aspect \"{}\" is not an aspect ratio: write W:H (e.g. 16:9, 9:16, 1:1) or a positive number (1.778); "
      "allowed 1:4 .. 4:1",
      s);
}

std::string fmt_seconds(int64_t frames) {
  return fmt::format("{:.3f} s", static_cast<double>(frames) / kFps);
}

}  // namespace

GenerateRequest GenerateRequest::from_json(const json& j) {
  if (!j.is_object()) fail("a generate request must be a JSON object, got {}", json_kind(j));
  static const std::set<std::string> known = {"prompt",      "width",      "height",     "aspect", "frames",
                                              "seconds",     "steps",      "seed",       "shift",  "audio_shift",
                                              "first_image", "last_image", "references", "loras",  "precision"};
  GenerateRequest r;
  for (const auto& [k, v] : j.items()) {
    if (!known.count(k)) {
      std::string allowed;
      for (const auto& n : known) allowed += (allowed.empty() ? "" : ", ") + n;
      fail("unknown request field \"{}\" (allowed: {})", k, allowed);
    }
    if (v.is_null()) continue;  // null = default
    if (k == "prompt")
      r.prompt = get_string(v, "prompt");
    else if (k == "width")
      r.width = get_int(v, "width");
    else if (k == "height")
      r.height = get_int(v, "height");
    else if (k == "aspect")
      r.aspect = v.is_number() ? fmt::format("{}", v.get<double>()) : get_string(v, "aspect");
    else if (k == "frames")
      r.frames = get_int(v, "frames");
    else if (k == "seconds")
      r.seconds = get_number(v, "seconds");
    else if (k == "steps") {
      const int64_t s = get_int(v, "steps");
      H3_CHECK(s >= 0 && s <= 1000000, "request field \"steps\" = {} is out of range", s);
      r.steps = static_cast<int>(s);
    } else if (k == "seed") {
      if (v.is_number_unsigned())
        r.seed = v.get<uint64_t>();
      else {
        const int64_t s = get_int(v, "seed");
        H3_CHECK(s >= 0, "request field \"seed\" must be a non-negative integer (0 .. 2^64-1), got {}", s);
        r.seed = static_cast<uint64_t>(s);
      }
    } else if (k == "shift")
      r.shift = get_number(v, "shift");
    else if (k == "audio_shift")
      r.audio_shift = get_number(v, "audio_shift");
    else if (k == "precision")
      r.precision = get_string(v, "precision");
    else if (k == "first_image")
      r.first_image = get_string(v, "first_image");
    else if (k == "last_image")
      r.last_image = get_string(v, "last_image");
    else if (k == "references") {
      H3_CHECK(v.is_array(), "request field \"references\" must be a list of {{\"kind\", \"path\"}} objects, got {}",
               json_kind(v));
      for (const json& e : v) {
        H3_CHECK(e.is_object() && e.contains("kind") && e.contains("path") && e.size() == 2,
                 "each entry of \"references\" must be {{\"kind\": \"image\"|\"video\"|\"audio\", \"path\": "
                 "FILE}}, got {}",
                 e.dump());
        r.references.push_back(
            {get_string(e["kind"], "references[].kind"), get_string(e["path"], "references[].path")});
      }
    } else if (k == "loras") {
      H3_CHECK(v.is_array(), "request field \"loras\" must be a list of {{\"path\", \"strength\"}} objects, got {}",
               json_kind(v));
      for (const json& e : v) {
        H3_CHECK(e.is_object() && e.contains("path") && (e.size() == 1 || (e.size() == 2 && e.contains("strength"))),
                 "each entry of \"loras\" must be {{\"path\": FILE, \"strength\": NUMBER}} (strength "
                 "optional, 1), "
                 "got {}",
                 e.dump());
        LoraRef l;
        l.path = get_string(e["path"], "loras[].path");
        if (e.contains("strength")) l.strength = get_number(e["strength"], "loras[].strength");
        r.loras.push_back(std::move(l));
      }
    }
  }
  return r;
}

json GenerateRequest::to_json() const {
  json j = {{"prompt", prompt}, {"aspect", aspect}, {"steps", steps}, {"shift", shift}, {"audio_shift", audio_shift}};
  if (width) j["width"] = *width;
  if (height) j["height"] = *height;
  if (frames) j["frames"] = *frames;
  if (seconds) j["seconds"] = *seconds;
  if (seed) j["seed"] = *seed;
  if (!first_image.empty()) j["first_image"] = first_image;
  if (!last_image.empty()) j["last_image"] = last_image;
  if (!precision.empty()) j["precision"] = precision;
  if (!references.empty()) {
    j["references"] = json::array();
    for (const auto& m : references) j["references"].push_back({{"kind", m.kind}, {"path", m.path}});
  }
  if (!loras.empty()) {
    j["loras"] = json::array();
    for (const auto& l : loras) j["loras"].push_back({{"path", l.path}, {"strength", l.strength}});
  }
  return j;
}

// ConditionMedia <-> JSON, field for field under the same names; every field must be present.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(ConditionMedia, role, path, width, height, frames, latent_frames, latent_h, latent_w,
                                   audio_samples, audio_latents)

json ResolvedRequest::to_json() const {
  json jm = json::array();
  for (const ConditionMedia& m : media) jm.push_back(m);
  json jl = json::array();
  for (const auto& l : loras) jl.push_back({{"path", l.path}, {"strength", l.strength}});
  return {{"prompt", prompt},
          {"mode", mode},
          {"media", jm},
          {"loras", jl},
          {"width", width},
          {"height", height},
          {"frames", frames},
          {"seconds", seconds},
          {"fps", kFps},
          {"latent_frames", latent_frames},
          {"latent_h", latent_h},
          {"latent_w", latent_w},
          {"audio_latents", audio_latents},
          {"steps", steps},
          {"model_calls", model_calls},
          {"seed", seed},
          {"shift", shift},
          {"audio_shift", audio_shift},
          {"precision", precision},
          {"notes", notes}};
}

ResolvedRequest ResolvedRequest::from_json(const json& j) {
  ResolvedRequest r;
  try {
    r.prompt = j.at("prompt").get<std::string>();
    r.width = j.at("width").get<int64_t>();
    r.height = j.at("height").get<int64_t>();
    r.frames = j.at("frames").get<int64_t>();
    r.seconds = j.at("seconds").get<double>();
    r.latent_frames = j.at("latent_frames").get<int64_t>();
    r.latent_h = j.at("latent_h").get<int64_t>();
    r.latent_w = j.at("latent_w").get<int64_t>();
    r.audio_latents = j.at("audio_latents").get<int64_t>();
    r.steps = j.at("steps").get<int>();
    r.model_calls = j.at("model_calls").get<int>();
    r.seed = j.at("seed").get<uint64_t>();
    r.shift = j.at("shift").get<double>();
    r.audio_shift = j.at("audio_shift").get<double>();
    read_if(j, "notes", r.notes);
    read_if(j, "mode", r.mode);
    read_if(j, "precision", r.precision);
    if (j.contains("loras"))
      for (const json& e : j["loras"])
        r.loras.push_back({e.at("path").get<std::string>(), e.at("strength").get<double>()});
    if (j.contains("media"))
      for (const json& e : j["media"]) r.media.push_back(e.get<ConditionMedia>());
  } catch (const json::exception& e) {
    fail("resolved request JSON is incomplete or mistyped: {}", e.what());
  }
  return r;
}

namespace {

// Prompt: non-empty text (the tokenizer refuses invalid UTF-8 later; refuse it here, before any work).
void resolve_prompt(const GenerateRequest& req, ResolvedRequest& r) {
  const bool blank = req.prompt.find_first_not_of(" \t\r\n") == std::string::npos;
  H3_CHECK(!blank,
           "the prompt is empty: give a description of the video and its sound (--prompt TEXT or "
           "--prompt-file FILE)");
  constexpr size_t kMaxPromptBytes = 1 << 16;
  H3_CHECK(req.prompt.size() <= kMaxPromptBytes, "the prompt has {} bytes; at most {} are allowed", req.prompt.size(),
           kMaxPromptBytes);
  utf8_nfc(req.prompt, "the prompt");  // throws naming the first invalid byte
  r.prompt = req.prompt;
}

// Canvas: a size in multiples of the VAE's, or one from the aspect (fl2va without a size: the first keyframe's).
void resolve_canvas(const GenerateRequest& req, const ModelLimits& lim, const MediaScanner& scan, ResolvedRequest& r) {
  const int64_t m = lim.canvas_multiple;
  if (req.width || req.height) {
    H3_CHECK(req.width && req.height, "give both width and height (multiples of {}), or neither and an aspect ratio",
             m);
    const int64_t w = *req.width, h = *req.height;
    H3_CHECK(w > 0 && w % m == 0, "width {} is not allowed: it must be a positive multiple of {}", w, m);
    H3_CHECK(h > 0 && h % m == 0, "height {} is not allowed: it must be a positive multiple of {}", h, m);
    const double ratio = static_cast<double>(w) / static_cast<double>(h);
    H3_CHECK(ratio >= 0.25 && ratio <= 4.0, "size {}x{} has aspect {:.3f}; allowed 1:4 .. 4:1 (0.25 .. 4)", w, h,
             ratio);
    // Each side is bounded first, so the product cannot overflow (a 2^32 x 2^32 request wraps to 0).
    H3_CHECK(w <= lim.max_canvas_pixels && h <= lim.max_canvas_pixels && w * h <= lim.max_canvas_pixels,
             "size {}x{} has {} pixels; at most {} are allowed (e.g. 1344x768 or 768x1344)", w, h, w * h,
             lim.max_canvas_pixels);
    r.width = w;
    r.height = h;
  } else {
    // fl2va without a size: the first keyframe's aspect (scanning the file refuses a bad one here).
    const std::string keyframe_aspect = condition_aspect(req, lim, scan);
    const std::string aspect = keyframe_aspect.empty() ? req.aspect : keyframe_aspect;
    const auto [aw, ah] = parse_aspect(aspect);
    const CanvasSize c = resolve_canvas_size(aw, ah);  // throws outside 1:4 .. 4:1
    H3_CHECK(c.width % m == 0 && c.height % m == 0, "aspect {} gives {}x{}, not a multiple of {}", aspect, c.width,
             c.height, m);
    r.width = c.width;
    r.height = c.height;
    r.notes.push_back(fmt::format("aspect {}{} -> {}x{}", aspect,
                                  keyframe_aspect.empty() ? "" : " (of the first keyframe)", r.width, r.height));
  }
}

// Duration: frames or seconds, snapped up to 17n+5 frames within the model's range; the latent sizes follow.
void resolve_duration(const GenerateRequest& req, const ModelLimits& lim, ResolvedRequest& r) {
  H3_CHECK(!(req.frames && req.seconds), "give frames or seconds, not both");
  int64_t frames = 124;
  if (req.seconds) {
    const double s = *req.seconds;
    H3_CHECK(std::isfinite(s) && s > 0 && s <= 3600, "seconds = {} is not allowed: the duration must be 5-15 s", s);
    frames = static_cast<int64_t>(std::nearbyint(s * static_cast<double>(kFps)));
    r.notes.push_back(fmt::format("{} s -> {} frames at {} fps", s, frames, kFps));
  } else if (req.frames) {
    frames = *req.frames;
  }
  H3_CHECK(frames >= 1 && frames <= 100000, "frames = {} is not allowed: {}..{} frames (17n+5, {}-{} s at {} fps)",
           frames, lim.min_frames, lim.max_frames, fmt_seconds(lim.min_frames), fmt_seconds(lim.max_frames), kFps);
  const int64_t aligned = align_num_frames(frames);
  H3_CHECK(aligned >= lim.min_frames && aligned <= lim.max_frames,
           "{} frames ({}{}) is outside the supported duration: {}..{} frames of the form 17n+5 ({} .. {} at {} "
           "fps)",
           frames, fmt_seconds(frames), aligned != frames ? fmt::format(", snapped up to {}", aligned) : "",
           lim.min_frames, lim.max_frames, fmt_seconds(lim.min_frames), fmt_seconds(lim.max_frames), kFps);
  if (aligned != frames) r.notes.push_back(fmt::format("frames {} snapped up to {} (17n+5)", frames, aligned));
  r.frames = aligned;
  r.seconds = static_cast<double>(aligned) / static_cast<double>(kFps);
  r.latent_frames = video_latent_frames(aligned);
  r.latent_h = r.height / lim.vae_spatial_ratio;
  r.latent_w = r.width / lim.vae_spatial_ratio;
  r.audio_latents = audio_latents_per_channel(aligned);
}

// Sampling: steps and shifts within the limits, the model calls they take, the seed (a random one when none).
void resolve_sampling(const GenerateRequest& req, const ModelLimits& lim, ResolvedRequest& r) {
  H3_CHECK(req.steps >= lim.min_steps && req.steps <= lim.max_steps,
           "steps = {} is not allowed: {}..{} (schedule grid points; {} means {} model calls)", req.steps,
           lim.min_steps, lim.max_steps, req.steps, req.steps - 1);
  for (auto [v, name] : {std::pair{req.shift, "shift"}, std::pair{req.audio_shift, "audio_shift"}})
    H3_CHECK(std::isfinite(v) && v > 0 && v <= 1000,
             "{} = {} is not allowed: a positive number up to 1000 "
             "(released: shift 12, audio_shift 3)",
             name, v);
  r.steps = req.steps;
  r.shift = req.shift;
  r.audio_shift = req.audio_shift;
  SamplingSpec spec;
  spec.steps = r.steps;
  spec.shift = r.shift;
  spec.audio_shift = r.audio_shift;
  r.model_calls = sampling_model_calls(spec);  // throws when the two grids collapse differently

  if (req.seed) {
    r.seed = *req.seed;
  } else {
    std::random_device rd;
    r.seed = (static_cast<uint64_t>(rd()) << 32 | rd()) & ((1ull << 53) - 1);  // exact in JSON doubles too
    r.notes.push_back(fmt::format("random seed {}", r.seed));
  }
}

// LoRAs: files that exist and hold LoRA keys, finite strengths (their keys are checked against the DiT
// when the generator merges them).
void resolve_loras(const GenerateRequest& req, ResolvedRequest& r) {
  H3_CHECK(req.loras.size() <= 16, "{} LoRAs given; at most 16 are allowed", req.loras.size());
  for (size_t i = 0; i < req.loras.size(); ++i) {
    const auto& l = req.loras[i];
    H3_CHECK(std::isfinite(l.strength) && std::fabs(l.strength) <= 100,
             "LoRA {} ({}): strength {} is not a number in -100 .. 100", i + 1, l.path, l.strength);
    H3_CHECK(std::filesystem::is_regular_file(l.path), "LoRA {}: {} does not exist (give a .safetensors LoRA file)",
             i + 1, l.path);
    try {
      H3_CHECK(looks_like_lora(l.path), "holds no lora_A/lora_B or lora_down/lora_up keys");
    } catch (const Error& e) {
      fail("LoRA {}: {} is not a LoRA: {}", i + 1, l.path, e.what());
    }
    r.loras.push_back(l);
  }
}

}  // namespace

ResolvedRequest resolve(const GenerateRequest& req, const ModelLimits& lim, const MediaScanner& scan) {
  ResolvedRequest r;
  if (!req.precision.empty()) {
    H3_CHECK(req.precision == "f64" || req.precision == "f32" || req.precision == "bf16" || req.precision == "fp8",
             "precision '{}' is not allowed: f64, f32 or bf16 (CPU), bf16 or fp8 (GPU), or leave it out for the "
             "generator's",
             req.precision);
    r.precision = req.precision;
  }
  resolve_prompt(req, r);
  resolve_canvas(req, lim, scan, r);
  resolve_duration(req, lim, r);
  resolve_sampling(req, lim, r);
  resolve_loras(req, r);
  // Keyframes / references: every file scanned and checked, their geometry fixed.
  resolve_conditions(req, r, lim, scan);
  return r;
}

}  // namespace h3

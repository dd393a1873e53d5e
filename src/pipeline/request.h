// What a caller may ask for: GenerateRequest (the JSON and CLI form), the rules a model accepts (ModelLimits) and
// resolve(), which checks a request cheaply, before anything is loaded, and fills in every default
// (ResolvedRequest). A bad request throws h3::Error saying what is allowed.
#pragma once
#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "pipeline/conditions.h"

namespace h3 {

// What a caller asks for. Unset optional fields take the defaults listed; the JSON form uses the same names.
struct GenerateRequest {
  std::string prompt;                    // required, non-empty UTF-8
  std::optional<int64_t> width, height;  // pixels, both or neither; positive multiples of 32 (of the model's)
  std::string aspect = "16:9";           // "W:H" or a number; used when width/height are absent; 1:4 .. 4:1
  std::optional<int64_t> frames;         // pixel frames at 24 fps, snapped up to 17n+5; default 124
  std::optional<double> seconds;         // alternative to frames: frames = round(seconds * 24), then snapped
  int steps = 50;                        // schedule grid points N (diffusers num_inference_steps); N-1 DiT calls
  std::optional<uint64_t> seed;          // absent: a random seed, recorded in the resolved request
  double shift = 12.0;                   // video schedule shift
  double audio_shift = 3.0;              // audio schedule shift

  // fl2va: keyframe files (first and/or last; the canvas takes the first keyframe's aspect when no size is
  // given). ref2va: reference files in the order given (kind "image", "video" or "audio"). The two modes do
  // not mix. Paths are read by the engine: the server fills them with its own stored uploads only.
  std::string first_image, last_image;
  struct MediaRef {
    std::string kind;
    std::string path;
  };
  std::vector<MediaRef> references;

  // LoRAs merged into the DiT for this request, in order (strength s: W + s * B A). Paths are read by the
  // engine: the server fills them from its --lora-dir only. A Generator re-merges from the pristine weights
  // whenever the set differs from the previous request's (never accumulating deltas).
  struct LoraRef {
    std::string path;
    double strength = 1.0;
    bool operator==(const LoraRef&) const = default;
  };
  std::vector<LoraRef> loras;

  // The DiT's precision for this request ("" = the generator's): bf16 or fp8 for a DiT on the GPU, f64, f32 or bf16
  // on the CPU. A generator whose DiT stays loaded rebuilds it in the new precision when its memory plan allows
  // (pipeline/generator.h), else refuses the request saying so.
  std::string precision;

  // Unknown fields, wrong types, negative seeds and sizes are refused with an h3::Error naming the field.
  static GenerateRequest from_json(const nlohmann::json& j);
  nlohmann::json to_json() const;
};

// What the loaded models accept (the released rules by default; procedural and test models keep them except
// the canvas multiple, which is the video VAE's spatial ratio times the patch).
struct ModelLimits {
  int64_t canvas_multiple = 32;  // VAE spatial ratio (16) x patch (2)
  int64_t vae_spatial_ratio = 16;
  int64_t min_frames = 124, max_frames = 345;  // aligned 17n+5 frames: 5..15 s at 24 fps
  int64_t max_canvas_pixels = 768 * 1344;      // largest trained area (W x H)
  int min_steps = 2, max_steps = 200;
  // References (ref2va): how many, and the sizes they are encoded at (pipeline/conditions.h).
  int max_references = 8;
  int64_t ref_image_short_edge = 2048;
  int64_t ref_video_short_edge = 768, ref_video_max_pixels = 768 * 1344;
  int64_t audio_hop = 800;  // samples per audio latent
  int audio_sample_rate = 32000;
  static ModelLimits released() { return {}; }
};

// A request after every check: the sizes the engine will run, and how they were derived.
struct ResolvedRequest {
  std::string prompt;
  int64_t width = 0, height = 0;  // pixels
  int64_t frames = 0;             // aligned 17n+5
  double seconds = 0;             // frames / 24
  int64_t latent_frames = 0, latent_h = 0, latent_w = 0;
  int64_t audio_latents = 0;  // per stereo channel
  int steps = 0;              // grid points N
  int model_calls = 0;        // DiT evaluations (N-1)
  uint64_t seed = 0;
  double shift = 12.0, audio_shift = 3.0;
  std::string mode = "t2va";                    // "t2va", "fl2va" (keyframes) or "ref2va" (references)
  std::vector<ConditionMedia> media;            // keyframes (first, then last) or references in request order
  std::vector<GenerateRequest::LoraRef> loras;  // checked: existing LoRA files, finite strengths
  std::string precision;                        // "" or a precision name (the generator checks its device)
  std::vector<std::string> notes;               // what was derived or snapped ("frames 130 snapped up to 141", ...)

  nlohmann::json to_json() const;
  static ResolvedRequest from_json(const nlohmann::json& j);  // for broadcasting; no re-validation of notes
};

// Validates everything that can be checked without loading or computing anything; throws h3::Error with the
// allowed range (size not a multiple of 32, aspect beyond 4:1, duration outside 5-15 s, empty prompt, steps
// out of range, ...). Deterministic except for an absent seed.
// `scan` reads keyframes/references (pipeline/conditions.h; empty: scan_media in this process).
ResolvedRequest resolve(const GenerateRequest& req, const ModelLimits& limits = ModelLimits::released(),
                        const MediaScanner& scan = {});

}  // namespace h3

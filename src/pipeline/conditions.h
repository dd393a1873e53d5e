// Keyframes (fl2va) and references (ref2va): from the files a request names to the condition rows the DiT
// reads (h3-model-spec §3.3-3.5, §5, §6.2, §7).
//
//   resolve time (cheap, before any model is loaded): every file is decoded once by scan_media() to refuse
//     missing / unreadable / unsuitable files and to fix each condition's geometry (ConditionMedia), so the
//     packed layout is known on every rank from the resolved request alone;
//   run time (rank 0): the files are read at that geometry, VAE-encoded (posterior mean; see below) and
//     normalised; visual conditions are noise-augmented once, x = 0.999 z + 0.001 e, and patchified; audio
//     references stay clean and are packed channel-major.
//
// Pixel preparation (D-MP MiniMaxH3ResizeStep / MiniMaxH3Ref2VASetupStep): the first keyframe is stretched to
// the canvas, the last one cover-scaled and centre-cropped; image references are scaled so their short edge
// is `ref_image_short_edge` (2048 released; rounded to the canvas multiple, no area cap); reference videos
// are held to 24 fps, truncated to the target frame count, snapped down to 17n+5 and stretched to their own
// canvas (the 768 rule of their aspect). Sound (standalone audio, video soundtracks) is truncated to the
// target duration, resampled to 32 kHz stereo, and becomes ceil(samples / hop) latents per channel.
//
// Known divergence: the reference samples the video posterior (seed 42) and rounds the latents to fp16; we
// use the posterior mean as ComfyUI does (spec §6.2 last bullets). The noise e of condition k comes from the
// request's seeded generator, stream 2 + k (streams 0 and 1 are the target video and audio noise), so every
// rank count draws the same values.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/audio_vae.h"
#include "model/layout.h"
#include "model/video_vae.h"

namespace h3 {

struct GenerateRequest;
struct ResolvedRequest;
struct ModelLimits;
class Tokenizer;
class QwenTextModel;

// One keyframe or reference after resolution. `role`: "first", "last" (fl2va) or "image", "audio", "video"
// (ref2va).
struct ConditionMedia {
  std::string role;
  std::string path;
  int64_t width = 0, height = 0;  // pixels the picture(s) are encoded at (0 for audio)
  int64_t frames = 0;             // pixel frames read (1 for pictures, 17n+5 for videos, 0 for audio)
  int64_t latent_frames = 0, latent_h = 0, latent_w = 0;
  int64_t audio_samples = 0;  // samples per channel read at 32 kHz (audio, video soundtrack; 0 = none)
  int64_t audio_latents = 0;  // ceil(audio_samples / hop)

  bool visual() const { return role != "audio"; }
};

// Scans the request's keyframe/reference files and checks them against the mode rules; called by resolve()
// before the canvas is chosen. Returns the aspect "W:H" of the first keyframe when the request gives no size
// ("" otherwise).
std::string condition_aspect(const GenerateRequest& req, const ModelLimits& lim);
// Fills r.mode and r.media from the request (r's canvas and frames must be resolved already).
void resolve_conditions(const GenerateRequest& req, ResolvedRequest& r, const ModelLimits& lim);

// The packed layout of a resolved request with `text_tags` (its L rows).
PackedLayout request_layout(const ResolvedRequest& r, const std::vector<int64_t>& text_tags);

// Condition rows in layout order: video [num_condition_video_rows, C*4], audio [num_condition_audio_rows,
// C_a] (either may have 0 rows).
struct ConditionRows {
  Tensor video;
  Tensor audio;
};
ConditionRows encode_conditions(const ResolvedRequest& r, const VideoVae& vvae, const AudioVae& avae);

// The text side of a request with media (spec §5): the prompt with `<Picture i>: `, `<Audio j>: `,
// `<Video k>: ` labels and the vision rows of each picture / video inside the text. THE SEAM for the
// Qwen3-VL vision tower (model/qwen3_vl.h): until it is wired in here, a request with pictures or videos is
// encoded from the prompt text alone and a warning says the vision rows are absent; audio-only references
// get their text labels.
struct PromptEncoding {
  Tensor embeds;                                           // [L, text_dim] f32
  std::vector<std::pair<int64_t, int64_t>> vision_ranges;  // [begin, end) rows of vision blocks in the text
  std::vector<std::string> warnings;
};
// The text the tokenizer sees when no vision rows are available (exposed for tests).
std::string prompt_text_without_vision(const ResolvedRequest& r);
PromptEncoding encode_prompt_with_media(const ResolvedRequest& r, const Tokenizer& tok,
                                        const QwenTextModel& text, int64_t layer);

}  // namespace h3

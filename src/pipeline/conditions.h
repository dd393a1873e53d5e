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
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "media/media_read.h"
#include "model/dit/layout.h"
#include "model/qwen3vl/preprocess.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/vision.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"

namespace h3 {

struct GenerateRequest;
struct ResolvedRequest;
struct ModelLimits;
class Tokenizer;

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

// How resolve() learns what a keyframe/reference file holds: scan_media() in this process when empty; the
// server passes a probe that runs the scan in a separate, resource-limited process (serve/probe.h), so an
// upload can cost the server neither memory nor a crash. Arguments as scan_media's.
using MediaScanner = std::function<MediaInfo(const std::string& path, int64_t max_frames, int64_t max_samples)>;

// Scans the request's keyframe/reference files and checks them against the mode rules; called by resolve()
// before the canvas is chosen. Returns the aspect "W:H" of the first keyframe when the request gives no size
// ("" otherwise).
std::string condition_aspect(const GenerateRequest& req, const ModelLimits& lim, const MediaScanner& scan = {});
// Fills r.mode and r.media from the request (r's canvas and frames must be resolved already).
void resolve_conditions(const GenerateRequest& req, ResolvedRequest& r, const ModelLimits& lim,
                        const MediaScanner& scan = {});

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
// `<Video k>: ` labels and, inside it, one vision block per picture and per video frame pair
// (<|vision_start|> + pads + <|vision_end|>), whose pad rows take the Qwen3-VL vision tower's outputs;
// DeepStack features are added after LM layers 0..K-1 at those rows and the LM runs on Qwen3-VL's mRoPE
// positions (model/qwen3vl/qwen3vl.h).
//
// What the processor is given: the pixels the VAE condition rows are made from (the reference's modular pipeline
// prepares keyframes and references first -- MiniMaxH3ResizeStep, MiniMaxH3Ref2VASetupStep -- and hands those to
// Qwen3-VL's processor). So a keyframe is on the target canvas (first stretched, last cover-cropped: 1344x768 at
// most, e.g. a 4000x3000 first keyframe gives a 1024x768 canvas, 768 vision tokens), an image reference at its
// `ref_image_short_edge` size (2048 released, no area cap), and a reference video's frames at 24 fps, cut to the
// target's frame count, on their own canvas, sampled at 2 fps (every 12th frame; odd counts padded by repeating
// the last). The processor's smart_resize then fixes the grid (min 65,536 / max 16,777,216 pixels for pictures,
// 4,096 / 25,165,824 per frame for videos: the released processor config), which leaves these sizes (multiples
// of 32 within the bounds) as they are.
//
// Rank 0 prepares (it holds the files): prepare_prompt() reads, preprocesses and runs the tower; the result
// travels to the encoder ranks (prompt_inputs_to_json / _tensors), which run the LM with encode_prompt().
struct PromptInputs {
  std::vector<int32_t> ids;
  std::vector<int64_t> positions;  // [3 * N] mRoPE positions; empty = text positions (no vision blocks)
  TextExtras extras;               // the pad rows, the tower's embeddings and DeepStack features
  std::vector<std::pair<int64_t, int64_t>> vision_ranges;  // [begin, end) of each vision block (its start
                                                           // and end tokens included): tag 0 in the layout
  std::string text;                                        // what was tokenised (log / tests)
};
// The labels and vision blocks of `r` in presentation order, from the grids of its pictures/videos
// (exposed for tests). `grids[i]` and `timestamps[i]` belong to visual media i (in r.media order).
std::vector<PromptMedia> prompt_media(const ResolvedRequest& r, const std::vector<GridThw>& grids,
                                      const std::vector<std::vector<double>>& timestamps);
// The tokenizer's ids of Qwen's vision tokens; throws naming the tokenizer when one is missing.
VisionTokenIds vision_token_ids(const Tokenizer& tok);
// `vision` may be null only when r has no pictures or videos. Throws (what, which file, what to do) on
// unreadable media, a prompt that itself holds vision tokens, or a tower that does not fit the LM.
PromptInputs prepare_prompt(const ResolvedRequest& r, const Tokenizer& tok, const Qwen3VlVisionModel* vision);

struct PromptEncoding {
  Tensor embeds;                                           // [L, text_dim] f32
  std::vector<std::pair<int64_t, int64_t>> vision_ranges;  // as in PromptInputs
  int64_t vision_rows = 0;                                 // pad rows fed by the vision tower
  std::vector<std::string> warnings;
};
// The text the tokenizer sees when no vision rows are needed (t2va, audio-only references; exposed for
// tests).
std::string prompt_text_without_vision(const ResolvedRequest& r);
// hidden_states[layer] of the prompt (collective over the text model's tensor-parallel group); `before_layer`
// runs before each of the `layer` decoder layers (the generator's cancellation check).
PromptEncoding encode_prompt(const PromptInputs& in, const Qwen3VlTextModel& text, int64_t layer,
                             const TextLayerHook& before_layer = {});

}  // namespace h3

// The device-memory plan of one GPU rank: which models stay loaded between requests and what each phase of a request
// holds at its peak, computed from the model configs, the request geometry and the device's memory before anything
// is loaded.
//
// A request runs three phases on the GPU: encode (the Qwen3-VL text tower, and the vision tower for pictures),
// denoise (the DiT) and decode (the video VAE's decoder, then the audio VAE's). Each model is either resident
// (loaded once, kept for every request) or loaded for its phase and freed after it. A phase's peak is the weights
// of every resident model, plus its own model's weights when that one is not resident, plus its activations:
//   peak(phase) = sum(resident weights) + [weights(phase model) if not resident] + activations(phase)
// The plan fits when the largest peak leaves `reserve` bytes of the device free (CUDA context, library handles and
// the caching allocator's slack). Policies: resident (everything loaded once), phases (nothing kept: the smallest
// peak), auto (h3 serve: the most residency that fits, trying {DiT, text, VAEs}, {DiT, VAEs}, {VAEs}, {} in that
// order, so the largest loads are the ones saved; h3 generate runs one request, so it takes phases).
//
// Weight bytes follow the models' own rules: the DiT keeps its patch projections, time MLP and output heads in f32
// and the rest in bf16, its block GEMM weights in e4m3 (one byte) in FP8 where fp8_layers.h allows; a tensor-parallel
// rank holds its slices (rank 0's, the largest by the partition rule). The video VAE uploads its ViT decoder only
// (the encoder stays on the CPU); the audio VAE decoder runs in f32 on the GPU.
// Activation bytes per phase are analytic upper bounds of the largest live set, checked in tests against peaks
// measured on an H200 (docs/notes.md: the DiT alone at 480p / 768p, 64.0 / 67.0 GiB bf16, 46.0 / 48.5 GiB FP8).
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "distributed/plan.h"
#include "model/dit/config.h"
#include "model/qwen3vl/text.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"

namespace h3 {

enum class MemoryPolicy { automatic, resident, phases };
std::string_view memory_policy_name(MemoryPolicy p);
MemoryPolicy memory_policy_from_name(const std::string& s);  // "auto", "resident" or "phases"; throws otherwise

inline constexpr int64_t kGiB = int64_t{1} << 30;

// Bytes on the device of each model's weights (what one rank holds) and of each phase's largest live activations.
int64_t dit_weight_bytes(const DitConfig& c, Precision p, DistMode mode = DistMode::ulysses, int K = 1, int U = 1);
// seq_len: packed rows S of the request; world = K * U ranks share the rows.
int64_t dit_activation_bytes(const DitConfig& c, Precision p, int64_t seq_len, DistMode mode = DistMode::ulysses,
                             int K = 1, int U = 1);
// The first `layers` decoder layers and the embeddings, split over `tp` ranks as text.h's units are.
int64_t text_weight_bytes(const Qwen3VlTextConfig& c, int64_t layers, Precision p, int tp = 1);
int64_t text_activation_bytes(const Qwen3VlTextConfig& c, Precision p, int64_t tokens);
int64_t video_decoder_weight_bytes(const VideoVaeConfig& c, Precision p);
// The stacked-unit decode of a T x h x w latent video (VideoVae::decode_streaming): its units per ViT call take at
// most a quarter of the device's memory (video_vae.h: batch_size) and the finished chunk rows wait on the device.
int64_t video_decode_activation_bytes(const VideoVaeConfig& c, Precision p, int64_t latent_frames, int64_t latent_h,
                                      int64_t latent_w, int64_t device_bytes);
int64_t audio_decoder_weight_bytes(const AudioVaeConfig& c);
int64_t audio_decode_activation_bytes(const AudioVaeConfig& c, int64_t audio_latents);

struct MemoryPlanInputs {
  DitConfig dit;
  bool dit_on_gpu = true;  // false: the DiT runs on the CPU (f32 / f64), holding no device memory
  Precision dit_precision = Precision::bf16;
  DistMode mode = DistMode::ulysses;
  int K = 1, U = 1;  // the denoise ranks' mesh (DistPlan)
  VideoVaeConfig video_vae;
  AudioVaeConfig audio_vae;
  bool vae_on_gpu = true;
  Precision vae_precision = Precision::bf16;
  Qwen3VlTextConfig text;
  int64_t text_layers = 50;
  Precision text_precision = Precision::f32;
  int text_tp = 1;
  bool text_on_gpu = true;      // false: the tower runs on the CPU (it holds no device memory)
  int64_t vision_bytes = 0;     // the vision tower's weights when the request has pictures and it runs on the GPU
  bool text_elsewhere = false;  // the tower lives on dedicated encoder ranks (--encoder-ranks K > 0)

  // The request (or, for a server, the largest request it accepts).
  int64_t seq_len = 0;  // packed rows S
  int64_t text_tokens = 0;
  int64_t latent_frames = 0, latent_h = 0, latent_w = 0, audio_latents = 0;

  int64_t device_bytes = 0;   // the GPU's memory available to this rank
  int64_t reserve_bytes = 0;  // 0: 2 GiB + 5 % of device_bytes
  MemoryPolicy policy = MemoryPolicy::phases;
};

struct PhaseMemory {
  std::string phase;  // "encode", "denoise", "decode"
  std::string model;  // the model the phase loads when it is not resident ("" when resident or on the CPU)
  int64_t resident = 0, weights = 0, activations = 0;
  int64_t peak() const { return resident + weights + activations; }
};

struct MemoryPlan {
  MemoryPolicy policy = MemoryPolicy::phases;  // as asked
  bool dit_resident = false, text_resident = false, vae_resident = false;
  bool text_on_gpu = true;
  int64_t dit_weights = 0, text_weights = 0, vae_weights = 0;  // video + audio decoders
  std::vector<PhaseMemory> phases;
  int64_t device_bytes = 0, reserve_bytes = 0;
  bool fits = false;
  std::string problem;  // when it does not fit: the phase that does not, by how much, and what would fit

  int64_t peak() const;
  const PhaseMemory& phase(const std::string& name) const;
  // "resident: DiT, VAEs; per phase: text tower" and one line per phase with its peak.
  std::vector<std::string> describe() const;
  nlohmann::json to_json() const;
};

// The plan for `in` (no suggestions when it does not fit; see plan_memory_or_suggest).
MemoryPlan plan_memory(const MemoryPlanInputs& in);
// The phases' peaks for a resident set already chosen (a generator checking each request against its residency).
MemoryPlan plan_memory_resident(const MemoryPlanInputs& in, bool dit, bool text, bool vae);
// The request's inputs at another frame count (its packed length and latent sizes), or nullopt when that count is
// not allowed; lets a refusal name the longest video that fits.
using FramesGeometry = std::function<std::optional<MemoryPlanInputs>(int64_t frames)>;
// The same; when it does not fit, `problem` also says what would: the phases policy, FP8 instead of bf16, the text
// tower on the CPU, or (given `at_frames` and the allowed counts `frame_choices`, longest first) the most frames
// that fit at this canvas.
MemoryPlan plan_memory_or_suggest(const MemoryPlanInputs& in, const FramesGeometry& at_frames = {},
                                  const std::vector<int64_t>& frame_choices = {});

}  // namespace h3

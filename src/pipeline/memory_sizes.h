// What each model holds on one GPU rank and what its phase needs beside its weights, in bytes, from the configs and
// the request geometry alone (no weights read): the inputs of the memory plan (pipeline/memory_plan.h). Also the
// compute time of one DiT forward on an H200, for the plan's estimate of how much weight streaming the compute hides.
//
// Weight bytes follow the models' own rules: the DiT keeps its patch projections, time MLP and output heads in f32
// and the rest in bf16, its block GEMM weights in e4m3 (one byte, plus one f32 scale a row) in FP8 where
// fp8_layers.h allows; a tensor-parallel rank holds its slices (rank 0's, the largest by the partition rule). The
// video VAE uploads its ViT decoder only (the encoder stays on the CPU); the audio VAE decoder runs in f32 on the GPU.
// Activation bytes per phase are analytic upper bounds of the largest live set, checked in tests against peaks
// measured on an H200 (docs/notes.md: the DiT alone at 480p / 768p, 64.0 / 67.0 GiB bf16, 46.0 / 48.5 GiB FP8).
#pragma once
#include <algorithm>
#include <cstdint>

#include "core/dtype.h"
#include "distributed/plan.h"
#include "model/dit/config.h"
#include "model/qwen3vl/text.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"

namespace h3 {

inline constexpr int64_t kGiB = int64_t{1} << 30;

// The DiT on one rank, split the way a layer streamer moves it: `blocks` transformer blocks of `block` bytes each
// (rank 0's slices of q/k/v, out, FFN and AdaLN; every block has the same shapes) and `base`, everything else
// (patch projections, time MLP, context embedder, the token refiner, the output heads), which stays on the device
// through the denoise phase.
struct DitBytes {
  int64_t base = 0, block = 0;
  int blocks = 0;
  int64_t total() const { return base + blocks * block; }
};
DitBytes dit_bytes(const DitConfig& c, Precision p, DistMode mode = DistMode::ulysses, int K = 1, int U = 1);
int64_t dit_weight_bytes(const DitConfig& c, Precision p, DistMode mode = DistMode::ulysses, int K = 1, int U = 1);
// seq_len: packed rows S of the request; world = K * U ranks share the rows.
int64_t dit_activation_bytes(const DitConfig& c, Precision p, int64_t seq_len, DistMode mode = DistMode::ulysses,
                             int K = 1, int U = 1);

// The text tower's first `layers` decoder layers split over `tp` ranks as text.h's units are (rank 0's units):
// `layer` bytes each, and `base`, the token embeddings (the norms ride with their layer).
struct TextBytes {
  int64_t base = 0, layer = 0;
  int64_t layers = 0;
  int64_t total() const { return base + layers * layer; }
};
TextBytes text_bytes(const Qwen3VlTextConfig& c, int64_t layers, Precision p, int tp = 1);
int64_t text_weight_bytes(const Qwen3VlTextConfig& c, int64_t layers, Precision p, int tp = 1);
int64_t text_activation_bytes(const Qwen3VlTextConfig& c, Precision p, int64_t tokens);

int64_t video_decoder_weight_bytes(const VideoVaeConfig& c, Precision p);
// The stacked-unit decode of a T x h x w latent video (VideoVae::decode_streaming): `batch` units of at most `unit`
// bytes go through the ViT at once (1 .. max_batch: the model's cap of 32 and one chunk row's units); beside them
// `fixed` bytes (two chunk rows of decoded units waiting for the stitch, one chunk's finished frames, the padded
// latents, workspaces). With `stack_bytes` for the stacked units the decode takes at(stack_bytes).
struct VideoDecodeBytes {
  int64_t unit = 0, max_batch = 1, fixed = 0;
  int64_t batch_for(int64_t stack_bytes) const;  // 0 when not even one unit fits
  int64_t at(int64_t stack_bytes) const { return fixed + std::max<int64_t>(batch_for(stack_bytes), 1) * unit; }
};
VideoDecodeBytes video_decode_bytes(const VideoVaeConfig& c, Precision p, int64_t latent_frames, int64_t latent_h,
                                    int64_t latent_w);
int64_t video_decode_activation_bytes(const VideoVaeConfig& c, Precision p, int64_t latent_frames, int64_t latent_h,
                                      int64_t latent_w, int64_t stack_bytes);
int64_t audio_decoder_weight_bytes(const AudioVaeConfig& c);
int64_t audio_decode_activation_bytes(const AudioVaeConfig& c, int64_t audio_latents);

// Seconds of one DiT forward on one rank of a K x U mesh on an H200 at the packed length S, for the released widths
// (DitConfig::named("full")) in bf16 or FP8: t(S) = a S + b S^2 through the measured 480p and 768p points
// (docs/performance.md: bf16 1.38 / 5.34 s, FP8 0.84 / 3.38 s at S 14,908 / 37,830), divided by the K * U ranks
// (ideal scaling: exchanges not counted). 0 for other widths and precisions (unknown). A slower card computes
// longer and so hides more of the weight copies: the plan's slowdown from streaming is an upper bound there.
double h200_dit_forward_seconds(const DitConfig& c, Precision p, int64_t seq_len, int K = 1, int U = 1);

}  // namespace h3

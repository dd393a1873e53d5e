// Element-wise and layout ops the two VAE decoders need beyond ops.h / ops_conv.h, with the same contract: f32 or
// f64 host tensors on the CPU backend (the reference), f32 or bf16 tensors on a GPU. Every output element is
// computed by one thread from its inputs alone, so results never depend on the thread count.
#pragma once
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace h3::ops {

// LayerScale residual: out[r, c] = x[r, c] + y[r, c] * scale[c] on [N, C]. On the GPU x/out and scale share a
// dtype and y may be bf16 while x is f32 (a bf16 branch added to an f32 residual stream).
Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale);

// The ViT decoder's unpatchify: y[V, C*pt*r*r] with V = t*h*w tokens in (t, h, w) order ->
//   out[c, ti*pt + a, yi*r + b, xi*r + e] = y[(ti*h + yi)*w + xi, ((c*pt + a)*r + b)*r + e],
// out shaped [C, t*pt, h*r, w*r].
Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t channels, int64_t pt, int64_t r);

// Anti-aliased SnakeBeta's middle step on x[B, C, L]: u = gain * x, out = u + sin^2(e^alpha[c] u) / (e^beta[c] + 1e-9)
// (alpha, beta per channel, log-scale; gain is the upsampler's ratio).
Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain);

// x[..., begin:end] along the last dim, as a new tensor.
Tensor slice_last(const Tensor& x, int64_t begin, int64_t end);

// min(hi, max(lo, x / divisor)) element-wise (divisor 1 with lo = -inf, hi = inf copies; the audio decoder's
// multi-kernel average and final clamp).
Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi);

// The reference's float32 RMSNorm inside its float64 run, on an f64 host tensor (CPU only; returns f64
// holding f32 values, except with kF64ThenWeight below). diffusers' ViT decoder calls `norm(x.float())` for
// the block norms and the q/k norms whatever the model dtype; ATen's rms_norm then works in the input's f32
// (a weight of another dtype forces its composite path, which casts the weighted result back to the input's
// dtype). So per group of `group` channels: x rounded to f32; the mean of x*x in f32, summed in ATen's CPU
// order (torch_cpu_sum_f32 with kReferenceSumLanes); + f32(eps); rsqrt as 1 / sqrt in f32; x * rsqrt in f32;
// with a weight (f64, the module's dtype) that product times the weight in f64, cast back to f32. `weight`
// picks where the weight comes in: kWeightThenF32 is the ATen composite above (the ViT decoder);
// kF64ThenWeight is transformers' Qwen3 RMSNorm (`weight * hidden_states.to(input_dtype)`): the f32 x * rsqrt
// cast to f64 first, then times the f64 weight in f64, the result left in f64.
enum class RefNormWeight { kWeightThenF32, kF64ThenWeight };
Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps,
                        RefNormWeight weight = RefNormWeight::kWeightThenF32);

// The sum of n contiguous floats as ATen's CPU sum kernel forms it (SumKernel.cpp, cascade_sum, contiguous
// inner reduction) with `lanes`-wide float vectors (8 in ATen's AVX2 and default builds, 16 with AVX-512):
// per-lane sums of whole vectors in four interleaved accumulators with the cascade levels, accumulator 0 +=
// 1, 2, 3; then the leftover elements and the lanes, in order, into a zero. Fewer than `lanes` elements: the
// scalar four-accumulator sum.
float torch_cpu_sum_f32(const float* x, int64_t n, int lanes);

// The vector width of the reference runs' ATen sum (the golden sets' float64 runs): 8 floats. Measured, not
// read: with 8 lanes both video-vae-mini decodes match at 4e-16, with 16 lanes (AVX-512) at 4e-8
// (docs/notes.md).
inline constexpr int kReferenceSumLanes = 8;

// rms_norm(x, w, group, eps) (ops.h) with the result rounded to `out` (x's dtype or bf16) in the same pass: bitwise
// rms_norm(...).to(out). The ViT decoder's norms read the f32 residual stream and feed bf16 GEMMs.
Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out);

// The ViT block's residual update and the next norm: sum = add_scaled(x, y, scale), normed = rms_norm_to(sum, w,
// group, eps, out), returned as {sum, normed} and bitwise those two ops (one pass over the rows on the GPU for an f32
// x and a bf16 out; the two ops elsewhere).
std::pair<Tensor, Tensor> add_scaled_norm_to(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                             int64_t group, double eps, DType out);

// Block-diagonal attention: q/k/v [blocks * n, H*D] hold `blocks` independent sequences of n rows each; block i's
// queries attend to block i's keys only. Each block is the same computation as attention() on its rows alone
// (bitwise), so stacking units for the linear layers never changes what attention sees.
Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks);

// The video decode's stitch evaluated per output pixel, for a few finished frames at a time.
//
// A temporal chunk's tiles form a rows x cols grid, tile (a, b) = tiles[a * cols + b] of shape [C, T, h_a, w_b]
// (every tile of a row has height h_a, of a column width w_b). The reference (model/vae/tiling.h stitch_tiles) blends
// tile (a, b) first with the RAW tile above along rows, then with the RAW tile to the left along columns, then cuts
// its trailing overlaps and concatenates. Per pixel that is, with kept_a = h_a - ov_a (0 if negative; the last row
// keeps h_a), row offsets off_a = sum of kept over rows before a (the same for columns):
//   y = Y - off_a, x = X - off_b,                       where off_a <= Y < off_a + kept_a, likewise b
//   v = tile(a, b)[c, f, y, x]
//   if a > 0 and y < e = min(h_{a-1}, h_a, ov_{a-1}):  v = tile(a-1, b)[c, f, h_{a-1} - e + y, x] * (1 - y/e) + v *
//   (y/e) if b > 0 and x < e = min(w_{b-1}, w_b, ov'_{b-1}): v = tile(a, b-1)[c, f, y, w_{b-1} - e + x] * (1 - x/e) + v
//   * (x/e)
// with the weights y/e, 1 - y/e computed in the element type exactly as blend_dim does, and the two products and
// the sum each rounded (no fused multiply-add). Output frame k of `frames` is S(cur, frame) or, when fade_e > 0,
// the temporal cross-fade S(prev, prev_frame) * (1 - p/e) + S(cur, frame) * (p/e) with p = fade_p, e = fade_e
// (VideoVae::stitch's blend of a chunk's first part against the previous chunk's overlap part).
// Returns [C, frames.size(), H, W] with H = sum of kept rows, W = sum of kept columns, on the tiles' device (f32 or
// f64 on the CPU, f32 on a GPU). Bitwise the same as VideoVae::stitch's frames for the same tiles.
struct StitchGrid {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> row_overlaps, col_overlaps;  // pixels between tile rows a and a + 1 (columns b and b + 1)
};
struct StitchFrame {
  int64_t frame = 0;       // frame index f inside the current chunk's tiles
  int64_t prev_frame = 0;  // frame inside the previous chunk's tiles (used when fade_e > 0)
  int64_t fade_p = 0, fade_e = 0;
};
Tensor stitch_frames(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const StitchGrid& grid,
                     const std::vector<StitchFrame>& frames);

// The per-axis numbers of the equations above, checked against the tiles (shared by the backends):
// size[a] = h_a, kept[a], off[a] (off[n] = H), extent[a] = min(h_{a-1}, h_a, ov_{a-1}) (0 for a = 0).
struct StitchAxis {
  std::vector<int64_t> size, kept, off, extent;
};
struct StitchLayout {
  int64_t channels = 0, tile_frames = 0;
  StitchAxis rows, cols;
};
// Fails naming `op` when the tiles do not form the grid (count, rank, shapes, dtypes, devices).
StitchLayout stitch_layout(const std::vector<Tensor>& tiles, const StitchGrid& grid, const char* op);

}  // namespace h3::ops

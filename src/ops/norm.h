// The norm family of the op API (ops/ops.h has the contract every op shares): RMSNorm in the roundings the models'
// recipes need, its fusions with the AdaLN modulation and the residual updates, LayerNorm, the video encoder's
// GroupNorm and weight normalisation. (The per-head q/k RMSNorm fused with RoPE is ops/rope.h's qk_norm_rope.)
#pragma once
#include <cstdint>
#include <optional>
#include <utility>

#include "core/tensor.h"
#include "ops/quantize.h"

namespace h3::ops {

// Where an RMS norm rounds: the one difference between the forms the models' recipes need. Every form computes
// x * rsqrt(mean(x^2) + eps) (times w) over groups of channels.
enum class NormRound : uint8_t {
  // In f32 (f64 for f64 x), rounded once to the output dtype: the DiT, the VAEs, the towers in f32.
  once,
  // transformers' Qwen3 RMSNorm: the normalised value rounded to x's dtype, then w times it rounded again
  // (`weight * hidden_states.to(input_dtype)`): two roundings in bf16; in f32 and f64 the same as `once`.
  twice,
  // The reference's float32 RMSNorm inside its float64 run, on an f64 host tensor (CPU only; f64 out holding f32
  // values). diffusers' ViT decoder calls `norm(x.float())` for the block norms and the q/k norms whatever the model
  // dtype; ATen's rms_norm then works in the input's f32 (a weight of another dtype forces its composite path, which
  // casts the weighted result back to the input's dtype). So per group of `group` channels: x rounded to f32; the mean
  // of x*x in f32, summed in ATen's CPU order (torch_cpu_sum_f32 with kReferenceSumLanes); + f32(eps); rsqrt as
  // 1 / sqrt in f32; x * rsqrt in f32; with a weight (f64, the module's dtype) that product times the weight in f64,
  // cast back to f32.
  f32_in_f64,
  // As f32_in_f64, with the weight as transformers' Qwen3 RMSNorm applies it in the f64 run: the f32 x * rsqrt cast to
  // f64 first, then times the f64 weight in f64, the result left in f64.
  f32_in_f64_weight_f64,
};

// RMSNorm over groups of `group` consecutive channels (group = last dim for a whole-row norm, head_dim for per-head
// q/k norms); multiplies by w[group] when given (`twice` needs one). The result is in x's dtype, or in `out` (a float
// dtype, with `once` only) in the same pass: bitwise rms_norm(...).to(out); the ViT decoder's norms read the f32
// residual stream and feed bf16 GEMMs.
Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps, NormRound round = NormRound::once,
                std::optional<DType> out = std::nullopt);

// Fused: modulate(round(rms_norm(x, w over whole rows)), shift, scale, idx), where round() rounds through bf16 when
// bf16_steps (the released recipe stores the norm's output in bf16). One pass on the GPU.
Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf16_steps);

// Fused gated residual, norm and modulation, one pass on the GPU:
//   x' = gate_residual(x, gate, idx, y, bf16_steps)   (x' = x when `gate` is undefined: Tensor())
//   h  = norm_modulate(x', w, eps, shift, scale, idx, bf16_steps), then for FP8 (of h's bf16 values):
//        rows:  quantize_fp8_rows(h)
//        bound: q = fp8(h / s) with one s = max((sqrt(C) * max|w| * max|1 + scale| + max|shift|) * 1.02 / 448,
//               1e-12) over every entry of w and the tables (|h| <= that bound for RMS-normed rows), in f32 in
//               that order, then rounded up to a power of two (fp8_bound.h): the same on any rows, any rank,
//               CPU or GPU.
// Bitwise the same as the separate ops.
struct ResidualNorm {
  Tensor x, h;
};
ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                    const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                                    bool bf16_steps, Fp8Out fp8 = Fp8Out::none);

// The ViT block's residual update and the next norm: sum = add_scaled(x, y, scale), normed = rms_norm(sum, w, group,
// eps, NormRound::once, out), returned as {sum, normed} and bitwise those two ops (one pass over the rows on the GPU
// for an f32 x and a bf16 out; the two ops elsewhere).
std::pair<Tensor, Tensor> add_scaled_rms_norm(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                              int64_t group, double eps, DType out);

// LayerNorm over the last dim of x[N, C] (biased variance), then the affine w[C], b[C] when given.
Tensor layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps);
// Group norm of x[C, T, S] with statistics per (group, t) over the group's C/groups channels and all S positions
// (the video encoder's "temporally isolated" GroupNorm), then the per-channel affine w[C], b[C].
Tensor group_norm_frames(const Tensor& x, int64_t groups, const Tensor* w, const Tensor* b, double eps);
// Weight normalisation (torch.nn.utils.weight_norm, dim 0): w = g * v / ||v||, the norm over all dims but 0.
Tensor weight_norm(const Tensor& g, const Tensor& v);

// The sum of n contiguous floats as ATen's CPU sum kernel forms it (SumKernel.cpp, cascade_sum, contiguous
// inner reduction) with `lanes`-wide float vectors (8 in ATen's AVX2 and default builds, 16 with AVX-512):
// per-lane sums of whole vectors in four interleaved accumulators with the cascade levels, accumulator 0 +=
// 1, 2, 3; then the leftover elements and the lanes, in order, into a zero. Fewer than `lanes` elements: the
// scalar four-accumulator sum. (The f32_in_f64 norms' mean; a plain function of floats, no backend.)
float torch_cpu_sum_f32(const float* x, int64_t n, int lanes);

// The vector width of the reference runs' ATen sum (the golden sets' float64 runs): 8 floats. Measured, not
// read: with 8 lanes both video-vae-mini decodes match at 4e-16, with 16 lanes (AVX-512) at 4e-8
// (docs/notes.md).
inline constexpr int kReferenceSumLanes = 8;

}  // namespace h3::ops

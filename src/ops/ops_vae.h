// Element-wise and layout ops the two VAE decoders need beyond ops.h / ops_conv.h, with the same contract: f32 or
// f64 host tensors on the CPU backend (the reference), f32 or bf16 tensors on a GPU. Every output element is
// computed by one thread from its inputs alone, so results never depend on the thread count.
#pragma once
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
// holding f32 values). diffusers' ViT decoder calls `norm(x.float())` for the block norms and the q/k norms
// whatever the model dtype; ATen's rms_norm then works in the input's f32 (a weight of another dtype forces its
// composite path, which casts the weighted result back to the input's dtype). So per group of `group` channels:
// x rounded to f32; the mean of x*x in f32, summed in ATen's CPU order (torch_cpu_sum_f32 with
// kReferenceSumLanes); + f32(eps); rsqrt as 1 / sqrt in f32; x * rsqrt in f32; with a weight (f64, the module's
// dtype) that product times the weight in f64, cast back to f32.
Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps);

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

}  // namespace h3::ops

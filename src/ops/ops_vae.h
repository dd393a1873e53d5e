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

}  // namespace h3::ops

// The activations of the op API (ops/ops.h has the contract every op shares): one output element per input element
// (SwiGLU: per pair of value and gate), so results never depend on the thread count. Host f32/f64 tensors, or f32/bf16
// GPU tensors computed in f32 and rounded once (or in bf16 steps where an op takes bf16_steps).
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// silu(x) elementwise.
Tensor silu(const Tensor& x);
// SwiGLU on u[N, 2F] laid out [value; gate] along columns: out[N,F] = value * silu(gate).
Tensor swiglu(const Tensor& u, bool bf16_steps);
// quantize_fp8_rows(swiglu(u, bf16_steps)), one pass on the GPU.
Tensor swiglu_fp8_rows(const Tensor& u, bool bf16_steps);
// GELU with the tanh approximation (PyTorch approximate="tanh", transformers "gelu_pytorch_tanh"):
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu_tanh(const Tensor& x);
// Exact GELU (PyTorch nn.GELU()): 0.5 x (1 + erf(x / sqrt(2))).
Tensor gelu_erf(const Tensor& x);
// Anti-aliased SnakeBeta's middle step on x[B, C, L]: u = gain * x, out = u + sin^2(e^alpha[c] u) / (e^beta[c] + 1e-9)
// (alpha, beta per channel, log-scale; gain is the upsampler's ratio).
Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain);

}  // namespace h3::ops

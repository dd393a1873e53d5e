// Element-wise activations beyond ops.h's silu, for the Qwen3-VL vision tower (host f32/f64 tensors, or f32/bf16 GPU
// tensors computed in f32 and rounded once; one output element per input element, so results never depend on the
// thread count).
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// GELU with the tanh approximation (PyTorch approximate="tanh", transformers "gelu_pytorch_tanh"):
//   0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
Tensor gelu_tanh(const Tensor& x);
// Exact GELU (PyTorch nn.GELU()): 0.5 x (1 + erf(x / sqrt(2))).
Tensor gelu_erf(const Tensor& x);

}  // namespace h3::ops

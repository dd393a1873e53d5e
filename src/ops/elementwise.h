// The element-wise family of the op API: sums, the AdaLN modulation and gated residual (rows of a [R, C] table picked
// by an index), the LayerScale residual, a divide-and-clamp and the bf16 rounding of the released recipe (ops/ops.h
// has the contract every op shares). Every output element is computed from its inputs alone.
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// x + y.
Tensor add(const Tensor& x, const Tensor& y);
// h * (1 + scale[idx]) + shift[idx]; shift/scale are [R, C] tables.
Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16_steps);
// x + gate[idx] * y.
Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16_steps);
// LayerScale residual: out[r, c] = x[r, c] + y[r, c] * scale[c] on [N, C]. On the GPU x/out and scale share a
// dtype and y may be bf16 while x is f32 (a bf16 branch added to an f32 residual stream).
Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale);
// min(hi, max(lo, x / divisor)) element-wise (divisor 1 with lo = -inf, hi = inf copies; the audio decoder's
// multi-kernel average and final clamp).
Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi);
// Rounds every element through bf16 in place (emulates the released bf16 recipe on the CPU).
void round_bf16_(Tensor& x);

}  // namespace h3::ops

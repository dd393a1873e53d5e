// Ops of the Qwen3-VL towers beyond ops.h, with the same contract (host f32/f64 tensors on the CPU backend, the
// reference; f32 or bf16 tensors on a GPU). They exist for the bf16 recipe as transformers computes it; on f32 and
// f64 tensors each is exactly an ops.h op.
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// transformers' Qwen3 RMSNorm over groups of `group` channels (group = the row for the layer norms, head_dim for the
// q/k norms): v = x * rsqrt(mean(x^2) + eps) with the statistics in f32 (f64 for f64 x), v rounded to x's dtype,
// then w * v rounded to x's dtype again. In bf16 that is two roundings (`weight * hidden_states.to(input_dtype)`);
// in f32 and f64 it is ops::rms_norm.
Tensor rms_norm_rounded(const Tensor& x, const Tensor& w, int64_t group, double eps);

// y[N, M] = x[N, K] w[M, K]^T returned in the accumulator's dtype: f32 for bf16 (and f32) weights, f64 for f64.
// A bf16 GEMM then keeps its f32 sums instead of rounding them to bf16 (partial sums that are added up before the
// single rounding of the whole product, as the tensor-parallel text tower does). x is taken in w's dtype.
Tensor linear_acc(const Tensor& x, const Tensor& w);

}  // namespace h3::ops

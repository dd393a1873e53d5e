// The norm family (backend/cuda/norm.cu): RMSNorm in its roundings and its fusions with the modulation and the gated
// residual, and LayerNorm.
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/<family>_ops.cpp) call them after the front door's
// checks. T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
// intermediates exactly where the CPU backend's bf16 emulation does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

cudaError_t rms_norm(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols, int64_t group,
                     float eps, cudaStream_t s);
// Fused: n = round_T(rms_norm(x) * w) over whole rows, then modulate(n, shift, scale, idx) — one pass.
cudaError_t norm_modulate(const void* x, const void* w, const void* shift, const void* scale, const int32_t* idx,
                          void* out, ElemType t, int64_t rows, int64_t cols, float eps, bool bf16_steps,
                          cudaStream_t s);

// The bf16 row kernels (backend/cuda/row.cuh) take rows of a width in 8s, 16-byte aligned buffers and rows of at most
// 16384 values, else return cudaErrorNotSupported (the caller then takes the generic kernels). A whole row is
// reduced in one thread block in an order fixed by the row width alone.
// Fused gated residual + norm + modulation: when gate is given, x' = bf16 ? rb(x + rb(gate[idx] * y)) : x + ...,
// stored to x_out (else x' = x); then h = norm_modulate(x') into h (bf16) and/or h_fp8 with per-row scales
// h_scale[r] = round_up_pow2(max(max|h[r]| / 448, 1e-12)) (h_fp8[r] = fp8(h[r] / h_scale[r]) of the bf16 h), or
// with the one given per-tensor scale *h_fixed_scale (device).
cudaError_t residual_norm_modulate(const void* x, const void* gate, const void* y, const int32_t* idx, void* x_out,
                                   const void* w, const void* shift, const void* scale, void* h, void* h_fp8,
                                   float* h_scale, const float* h_fixed_scale, int64_t rows, int64_t cols, float eps,
                                   bool bf16_steps, cudaStream_t s);
// *out = max((sqrt(cols) * max|w| * max|1 + scale| + max|shift|) * 1.02 / 448, 1e-12) over w[cols] and the
// bf16 tables of table_elems values, rounded up to a power of two (residual_norm_modulate's FP8 bound, ops.h).
cudaError_t norm_fp8_bound(const void* w, int64_t cols, const void* shift, const void* scale, int64_t table_elems,
                           float* out, cudaStream_t s);

// transformers' Qwen3 RMSNorm (ops::rms_norm with NormRound::twice): per group of `group` channels of each row,
// y = T(T(x * 1/sqrt(mean(x^2) + eps)) * w), the mean in f32 (a block sum whose order depends on the group width
// only). For f32 the inner rounding is the identity.
cudaError_t rms_norm_rounded(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols,
                             int64_t group, float eps, cudaStream_t s);

// LayerNorm over rows of `cols` (biased variance, two passes in f32); w, b (dtype t) may be null.
cudaError_t layer_norm(const void* x, const void* w, const void* b, void* y, ElemType t, int64_t rows, int64_t cols,
                       float eps, cudaStream_t s);

// RMSNorm over groups of `group` channels of f32 x [rows, cols] times an f32 weight (may be null), stored as bf16:
// the arithmetic of rms_norm above (same block shape and reduction order), rounded once at the
// store.
cudaError_t rms_norm_f32_to_bf16(const float* x, const float* w, void* y, int64_t rows, int64_t cols, int64_t group,
                                 float eps, cudaStream_t s);

// add_scaled (f32 x and scale, y f32 or bf16: sum = x + y * scale, stored) and rms_norm_f32_to_bf16 of that sum (into
// out) in one pass, bitwise the two calls. Groups of at most 1024 * kResidualNormMaxPer channels (else
// cudaErrorInvalidValue; the caller runs the two ops).
constexpr int kResidualNormMaxPer = 8;
cudaError_t add_scaled_rms_norm_to_bf16(const float* x, const void* y, ElemType ty, const float* scale, float* sum,
                                        const float* w, void* out, int64_t rows, int64_t cols, int64_t group, float eps,
                                        cudaStream_t s);

}  // namespace h3::cuda

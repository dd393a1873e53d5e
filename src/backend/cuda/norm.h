// RMSNorm and its fusions with the modulation and the gated residual (backend/cuda/norm.cu).
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/ops.cpp) call them after the front door's checks.
// T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
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

}  // namespace h3::cuda

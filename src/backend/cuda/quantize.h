// FP8 e4m3 quantization and its inverse (backend/cuda/quantize.cu).
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/<family>_ops.cpp) call them after the front door's
// checks. T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
// intermediates exactly where the CPU backend's bf16 emulation does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// y = fp8(x / *scale) with a given scale (device f32); values beyond 448 * scale saturate.
cudaError_t quantize_fp8_fixed(const void* x, ElemType t, int64_t n, const float* scale, void* y, cudaStream_t s);
// Largest |x| over n values into *amax (f32, device), for FP8 scaling.
cudaError_t absmax(const void* x, ElemType t, int64_t n, float* amax, cudaStream_t s);
// y = fp8(x / scale) with scale = max(amax / 448, tiny) read from device memory; writes the scale to *scale_out.
cudaError_t quantize_fp8(const void* x, ElemType t, int64_t n, const float* amax, void* y, float* scale_out,
                         cudaStream_t s);

// y = bf16(x * *scale) for fp8 e4m3 x and a device f32 scale: the dequantize of an FP8 result.
cudaError_t dequantize_fp8(const void* x, int64_t n, const float* scale, void* y, cudaStream_t s);

// The bf16 row kernels (backend/cuda/row.cuh) take rows of a width in 8s, 16-byte aligned buffers and rows of at most
// 16384 values, else return cudaErrorNotSupported (the caller then takes the generic kernels). A whole row is
// reduced in one thread block in an order fixed by the row width alone.
// Per-row FP8 e4m3 quantization of bf16 rows: q[r] = fp8(x[r] / scales[r]), scales[r] as above.
cudaError_t quantize_rows_fp8(const void* x, void* q, float* scales, int64_t rows, int64_t cols, cudaStream_t s);
// bf16 out[r][c] = q[r][c] * scales[r] for fp8 e4m3 rows q (per-tensor scales: dequantize_fp8).
cudaError_t dequantize_rows_fp8(const void* q, const float* scales, void* out, int64_t rows, int64_t cols,
                                cudaStream_t s);
// out[i] = scale[0] for i < n (a per-tensor FP8 scale widened to a per-row vector).
cudaError_t broadcast_scale(const float* scale, float* out, int64_t n, cudaStream_t s);

}  // namespace h3::cuda

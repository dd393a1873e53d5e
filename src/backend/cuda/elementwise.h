// The element-wise family (backend/cuda/elementwise.cu): the AdaLN modulation, the gated residual, the sum, the
// LayerScale residual and the divide-and-clamp.
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/<family>_ops.cpp) call them after the front door's
// checks. T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
// intermediates exactly where the CPU backend's bf16 emulation does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

cudaError_t modulate(const void* h, const void* shift, const void* scale, const int32_t* idx, void* out, ElemType t,
                     int64_t rows, int64_t cols, bool bf16_steps, cudaStream_t s);
cudaError_t gate_residual(const void* x, const void* gate, const int32_t* idx, const void* y, void* out, ElemType t,
                          int64_t rows, int64_t cols, bool bf16_steps, cudaStream_t s);
cudaError_t add(const void* x, const void* y, void* out, ElemType t, int64_t n, cudaStream_t s);
// out[r, c] = x[r, c] + y[r, c] * scale[c]; x, scale, out of type tx, y of type ty.
cudaError_t add_scaled(const void* x, const void* y, const void* scale, void* out, ElemType tx, ElemType ty,
                       int64_t rows, int64_t cols, cudaStream_t s);
// y = min(hi, max(lo, x / divisor)).
cudaError_t divide_clamp(const void* x, void* y, ElemType t, int64_t n, float divisor, float lo, float hi,
                         cudaStream_t s);

}  // namespace h3::cuda

// The AdaLN modulation, the gated residual and the sum (backend/cuda/modulate.cu).
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/ops.cpp) call them after the front door's checks.
// T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
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

}  // namespace h3::cuda

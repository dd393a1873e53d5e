// The Qwen3-VL towers' element-wise and row kernels (backend/cuda/text_kernels.cu): plain functions of pointers, sizes
// and a stream that return a CUDA error code; backend/cuda/text_ops.cpp checks tensors first. T is f32 or bf16,
// arithmetic in f32.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// transformers' Qwen3 RMSNorm (ops_text.h rms_norm_rounded): per group of `group` channels of each row,
// y = T(T(x * 1/sqrt(mean(x^2) + eps)) * w), the mean in f32 (a block sum whose order depends on the group width
// only). For f32 the inner rounding is the identity.
cudaError_t rms_norm_rounded(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols,
                             int64_t group, float eps, cudaStream_t s);
// GELU in f32, rounded once to T: tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) or the exact
// 0.5 x (1 + erf(x / sqrt(2))).
cudaError_t gelu(const void* x, void* out, ElemType t, int64_t n, bool tanh_form, cudaStream_t s);

}  // namespace h3::cuda

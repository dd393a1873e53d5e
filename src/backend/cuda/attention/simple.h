// The plain attention kernel (backend/cuda/attention/simple.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// A plain flash-style attention (one warp per query row and head, online softmax in f32) for any sequence
// lengths: the fallback when cuDNN cannot run, and an independent check of it. q/k/v/o [rows, heads*d], d <= 256.
cudaError_t attention_simple(const void* q, const void* k, const void* v, void* o, ElemType t, int64_t nq, int64_t nk,
                             int64_t heads, int64_t d, cudaStream_t s);

}  // namespace h3::cuda

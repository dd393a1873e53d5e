// The text tower's CUDA kernels (backend/cuda/attention/causal.cu): plain functions of pointers, sizes and a stream
// that return a CUDA error code; backend/cuda/attention_ops.cpp checks tensors first.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// Causal grouped-query attention: q/o [n, heads*d], k/v [n, kv_heads*d] (kv_heads divides heads; query head h
// reads KV head h / (heads / kv_heads)); row i attends to rows 0..i; softmax scale 1/sqrt(d); d <= 256. One warp
// per (row, query head), keys in order with an online softmax in f32. t: f32 or bf16.
cudaError_t attention_causal(const void* q, const void* k, const void* v, void* o, ElemType t, int64_t n, int64_t heads,
                             int64_t kv_heads, int64_t d, cudaStream_t s);

}  // namespace h3::cuda

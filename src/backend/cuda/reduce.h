// Device-side reductions for the NCCL communicator (distributed/comm_nccl.cpp).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// out[i] = sum over j = 0..n-1, in that order, of parts[j * count + i] (f32, f64, i64; bf16 summed in f32).
cudaError_t sum_blocks(const void* parts, ElemType t, int n, int64_t count, void* out, cudaStream_t s);

}  // namespace h3::cuda

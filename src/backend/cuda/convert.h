// Dtype conversion of device buffers (backend/cuda/convert.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

cudaError_t convert(const void* src, ElemType st, void* dst, ElemType dt, int64_t n, cudaStream_t s);

}  // namespace h3::cuda

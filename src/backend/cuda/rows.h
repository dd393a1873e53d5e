// Row gathers and scatters by an index (backend/cuda/rows.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// out[i] = x[idx[i]] (gather) or out[idx[i]] = x[i] (scatter), rows of row_bytes (a multiple of 2).
cudaError_t gather_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s);
cudaError_t scatter_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s);

}  // namespace h3::cuda

// Procedural weights on the device (backend/cuda/procedural.cu).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// Procedural weights: out[i] = float(offset + (((splitmix64(base + i) >> 11) * 2^-53) * 2 - 1) * scale), computed in
// f64 exactly as io/procedural.cpp does on the host.
cudaError_t procedural(uint64_t base, double scale, double offset, float* out, int64_t n, cudaStream_t s);

}  // namespace h3::cuda

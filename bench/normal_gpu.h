// Shared by the GPU benchmarks: the GPU started as h3 starts it, and seeded normal inputs on the GPU without
// generating billions of values on the host.
#pragma once
#include <algorithm>
#include <cstdint>

#include "backend/backend.h"
#include "core/knobs.h"
#include "core/tensor.h"
#include "pipeline/noise.h"

namespace h3::bench {

// Starts the GPU backend with the knobs' numerics, GEMM tuning and memory limit (H3_FP8_FAST_ACCUM, H3_GEMM_TUNE,
// H3_MAX_DEVICE_MEMORY), as h3 has them.
inline void start_gpu_from_knobs() {
  GpuOptions gpu;
  gpu.numerics = numerics_from_knobs(false);
  gpu.gemm_tune = knobs().gemm_tune;
  gpu.max_device_bytes = knobs().max_device_bytes;
  start_gpu_backend(gpu);
}

// Seeded normal values times `scale` as a bf16 GPU tensor [rows, cols] (a 1M-value block repeated; never zeros,
// which would flatter the GEMMs).
inline Tensor normal_gpu(int64_t rows, int64_t cols, uint64_t seed, float scale) {
  const int64_t n = rows * cols, block = std::min<int64_t>(n, 1 << 20);
  Tensor b = seeded_normal({block}, seed, 0).to(DType::f32);
  Tensor t(DType::f32, {rows, cols});
  for (int64_t i = 0; i < n; i += block) {
    const int64_t c = std::min(block, n - i);
    for (int64_t j = 0; j < c; ++j) t.data<float>()[i + j] = b.data<float>()[j] * scale;
  }
  return t.to_device(Device::cuda).to(DType::bf16);
}

}  // namespace h3::bench

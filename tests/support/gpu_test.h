// Shared by the GPU test files (test_cuda_*.cpp): start the GPU backend once or report every GPU test SKIPPED,
// loudly; random inputs both backends can start from bit for bit.
#pragma once
#include <gtest/gtest.h>

#include <cstdio>
#include <exception>

#include "backend/backend.h"
#include "core/dtype.h"
#include "core/tensor.h"
#include "pipeline/noise.h"

namespace h3::test {

// True once the GPU backend runs (deterministic mode, GPU of rank 0); false on machines without a usable GPU.
inline bool gpu_ready() {
  static const bool ok = [] {
    try {
      GpuOptions o;
      o.numerics.deterministic = true;
      start_gpu_backend(o);
      return true;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "no GPU: %s\n", e.what());
      return false;
    }
  }();
  return ok;
}

// Normal f32 values (seeded_normal, `stream`) scaled and rounded to bf16-exact magnitudes, so a bf16 copy on the GPU
// and the f32 original on the CPU hold the same numbers.
inline Tensor bf16_exact_normal(Shape s, uint64_t seed, uint64_t stream, double scale = 1.0) {
  Tensor t = seeded_normal(s, seed, stream);
  float* p = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = round_bf16(static_cast<float>(p[i] * scale));
  return t;
}

}  // namespace h3::test

#define H3_REQUIRE_GPU()        \
  if (!::h3::test::gpu_ready()) \
  GTEST_SKIP() << "SKIPPED LOUDLY: no usable NVIDIA GPU (the GPU tests run on the device machine)"

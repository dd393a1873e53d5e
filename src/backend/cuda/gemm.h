// Row-major GEMMs through cuBLASLt: y[n, m] = x[n, k] * w[m, k]^T (+ bias[m]), f32 accumulation.
//   bf16 x bf16 -> bf16, f32 x f32 -> f32 (no TF32), fp8 e4m3 x fp8 e4m3 -> bf16 with per-tensor scales or with
//   per-row scales (one per row of x and one per row of w: cuBLASLt's outer-vector scaling).
// Algorithms: cuBLASLt's heuristic candidates for the shape, each timed once on the real buffers and the fastest
// kept (H3_GEMM_TUNE=0: the first that runs); with a gemm_algos file, the algorithm it names for the shape. In
// deterministic mode one algorithm per (dtypes, m, k) is chosen at a fixed reference row count without split-K and
// without timing, so a row's result never depends on how many rows a rank holds.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace h3::cuda {

struct GemmArgs {
  const void* x = nullptr;
  const void* w = nullptr;
  void* y = nullptr;
  const void* bias = nullptr;  // dtype of y (bf16 for fp8 inputs); null for none
  int64_t n = 0, m = 0, k = 0;
  DType in = DType::bf16, out = DType::bf16;
  const float* x_scale = nullptr;  // fp8 only: device scalars, y = (x_scale * w_scale) * (xq . wq)
  const float* w_scale = nullptr;
  bool row_scales = false;  // fp8: x_scale has n entries and w_scale m entries, y[i][j] = x_scale[i] * w_scale[j] * ...
};

void gemm(const GemmArgs& a);
// The gemm_algos knob (GpuOptions::gemm_algos): keep the chosen algorithm per shape in `path` and take the ones it
// holds (backend/cuda/gemm_algo_cache.h); empty: none. Called once at start.
void open_gemm_algo_cache(const std::string& path, const std::string& device);
// Whether cuBLASLt has an algorithm for this GEMM (used to fall back when per-row FP8 scaling is unsupported).
bool gemm_supported(const GemmArgs& a);
// ops::PinnedGemms on the GPU (the table's pin_gemms): +1 entering a scope on this thread, -1 leaving it. While any
// is open, this thread's GEMMs choose their algorithm as deterministic mode does.
void pin_gemms(int delta);

}  // namespace h3::cuda

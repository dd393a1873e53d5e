// Which of the DiT blocks' GEMMs run in FP8 (precision fp8 on the GPU) and which stay in bf16.
//
// cuBLASLt's e4m3 GEMMs take a weight [m, k] only when both m and k are multiples of 16 (its FP8 kernels read 16-byte
// rows of the weight and of the activations). The released widths all are (hidden 5376, inner 7168, 2 x ffn 28672,
// ffn 14336), but test models (hidden 72), and slices of a tensor-parallel split (ffn 14336 over 3 ranks: 4779 columns)
// need not be. A layer kind whose weight any rank of the plan cannot run in FP8 stays in bf16 on every rank, so the
// ranks always agree on the recipe. The rest of the FP8 path follows the weights: a norm hands its output quantized
// only to FP8 projections, and the SwiGLU quantizes only for an FP8 second projection.
//
// The four kinds, with the weight each rank (t, u) of a K x U mesh holds (dit.h, DitModel):
//   qkv     to_q / to_k / to_v rows of its heads:    [heads_qkv * D, H]
//   out     to_out.0 columns of its heads:           [H, heads_out * D]
//   ff_in   ff.net.0.proj value and gate rows:       [2 * F_t, H]
//   ff_out  ff.net.2 columns:                        [H, F_t]
// The token refiner's layers are bf16 in every recipe.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "distributed/plan.h"
#include "model/dit/config.h"

namespace h3 {

// Whether an FP8 GEMM takes a weight of m outputs and k inputs.
bool fp8_gemm_takes(int64_t m, int64_t k);

struct DitFp8Layers {
  bool qkv = false, out = false, ff_in = false, ff_out = false;  // false: bf16 (and every kind of a non-FP8 model)
  // One entry per layer kind kept in bf16: "qkv [96 x 72]: k = 72 is not a multiple of 16" (the first failing
  // rank's shape).
  std::vector<std::string> kept_bf16;
  bool all_fp8() const { return kept_bf16.empty(); }
  // "every block GEMM in FP8" or "FP8 except qkv, out (kept in bf16: ...)".
  std::string summary() const;
};

// The rule above for the blocks of `c` split as (mode, K, U) (DistPlan::single(): K = U = 1).
DitFp8Layers dit_fp8_layers(const DitConfig& c, DistMode mode, int K, int U);
// Logs the layers kept in bf16 as a warning, once per process for each distinct summary (every model of a run, and
// every rank thread of a test, would say the same).
void warn_fp8_layers_once(const DitFp8Layers& layers);

}  // namespace h3

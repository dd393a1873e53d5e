// The GEMM family of the op API (ops/ops.h has the contract every op shares).
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// What a GEMM does with its f32 (f64 for f64 weights) sums: rounded to the weight's dtype, the layer's output, or kept
// in the accumulator's dtype, f32 for bf16 weights, so that partial sums are added up before one rounding of the
// whole product (the tensor-parallel text tower). On f32 and f64 weights both are the same product.
enum class Sums : uint8_t { rounded, kept };

// y[N,M] = x[N,K] * w[M,K]^T (+ bias[M]). Sums::kept takes no bias, and x in w's dtype (converted where the backend
// converts parameters).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr, Sums sums = Sums::rounded);

// While one is alive, GEMMs that this thread issues on `device` choose their algorithm as deterministic mode does (one
// per weight shape, picked at a fixed reference row count, no split-K), so a row's result does not depend on how many
// rows are stacked with it. The video decode stacks several units per GEMM under it and stays bitwise equal to
// decoding the units one at a time (and so to any sharded split). Nests; a no-op on the CPU, whose GEMM order never
// depends on the row count.
class PinnedGemms {
 public:
  explicit PinnedGemms(Device device);
  ~PinnedGemms();
  PinnedGemms(const PinnedGemms&) = delete;
  PinnedGemms& operator=(const PinnedGemms&) = delete;

 private:
  Device device_;
};

}  // namespace h3::ops

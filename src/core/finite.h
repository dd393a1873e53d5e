// Non-finite values (NaN, Inf) in host tensors, found from the bit patterns (an all-ones exponent: bf16, f16, f32,
// f64; S.1111.111 in fp8 e4m3, which has no Inf), so stored weights are checked without converting them. Used
// where weights enter (DiT checkpoints, VAE weights) so that a damaged file is refused before a run, not found as
// a video of NaNs at its end. Threaded over core/parallel.h; a scan costs about one read of the bytes.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace h3 {

struct NonFinite {
  int64_t count = 0;   // NaN and Inf values
  int64_t first = -1;  // row-major index of the first one (-1: none)
};

// Integer tensors hold none; device tensors are refused (copy them to the host first).
NonFinite find_non_finite(const Tensor& t);
// The same for n elements of `dtype` at `data` (host memory), on the calling thread: for callers that already run
// in parallel over parts of a tensor (the staged loader scans each part as it is read).
NonFinite find_non_finite(DType dtype, const void* data, int64_t n);

}  // namespace h3

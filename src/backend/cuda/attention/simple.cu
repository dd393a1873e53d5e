// The plain attention kernel (backend/cuda/attention/simple.h): one warp per query row and head
// (attention/warp_row.cuh). Built with --fmad=false, so that a*b+c rounds
// twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/attention/simple.h"
#include "backend/cuda/attention/warp_row.cuh"
#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"

namespace h3::cuda {

namespace {

// Warp w handles query row i = w / heads, head h = w % heads, every key.
template <typename T, int kPer>
__global__ void attention_simple_kernel(const T* q, const T* k, const T* v, T* o, int64_t nq, int64_t nk, int64_t heads,
                                        int64_t d, float scale) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= nq * heads) return;
  const int64_t i = warp / heads, h = warp % heads, cols = heads * d;
  warp_attention_row<T, kPer>(q, k, v, o, lane, i, h, h, cols, cols, d, nk, scale);
}

}  // namespace

cudaError_t attention_simple(const void* q, const void* k, const void* v, void* o, ElemType t, int64_t nq, int64_t nk,
                             int64_t heads, int64_t d, cudaStream_t s) {
  if (nq == 0 || heads == 0) return cudaSuccess;
  if (d > 256 || nk == 0) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int64_t threads = nq * heads * 32;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    attention_simple_kernel<T, 8><<<blocks_for(threads, 128), 128, 0, s>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), nq, nk, heads,
        d, scale);
  });
}

}  // namespace h3::cuda

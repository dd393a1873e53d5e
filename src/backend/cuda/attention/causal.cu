// The text tower's causal grouped-query attention (backend/cuda/attention/causal.h). A simple kernel: the text tower is
// a few percent of a job, so one warp walks the keys of one (row, query head) in order (attention/warp_row.cuh, as the
// plain kernel of attention/simple.cu does).
#include <cuda_bf16.h>

#include <cfloat>
#include <cstdint>

#include "backend/cuda/attention/causal.h"
#include "backend/cuda/attention/warp_row.cuh"
#include "backend/cuda/device.cuh"

namespace h3::cuda {

namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kMaxPerLane = 8;  // head_dim <= 32 * 8

// Warp w handles query row i = w / heads, head h = w % heads (KV head h / group), keys 0..i.
template <typename T>
__global__ void attention_causal_kernel(const T* q, const T* k, const T* v, T* o, int64_t n, int64_t heads,
                                        int64_t group, int64_t d, float scale) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= n * heads) return;
  const int64_t i = warp / heads, h = warp % heads, kvh = h / group;
  const int64_t qcols = heads * d, kcols = (heads / group) * d;
  warp_attention_row<T, kMaxPerLane>(q, k, v, o, lane, i, h, kvh, qcols, kcols, d, i + 1, scale);
}

template <typename T>
void launch(const void* q, const void* k, const void* v, void* o, int64_t n, int64_t heads, int64_t group, int64_t d,
            cudaStream_t s) {
  const int64_t warps = n * heads;
  const int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  attention_causal_kernel<T><<<static_cast<unsigned>(blocks), 32 * kWarpsPerBlock, 0, s>>>(
      static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), n, heads, group,
      d, 1.0f / sqrtf(static_cast<float>(d)));
}

}  // namespace

cudaError_t attention_causal(const void* q, const void* k, const void* v, void* o, ElemType t, int64_t n, int64_t heads,
                             int64_t kv_heads, int64_t d, cudaStream_t s) {
  if (n == 0 || heads == 0) return cudaSuccess;
  if (d <= 0 || d > 32 * kMaxPerLane || kv_heads <= 0 || heads % kv_heads != 0) return cudaErrorInvalidValue;
  if ((n * heads + kWarpsPerBlock - 1) / kWarpsPerBlock > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int64_t group = heads / kv_heads;
  if (t == ElemType::f32)
    launch<float>(q, k, v, o, n, heads, group, d, s);
  else if (t == ElemType::bf16)
    launch<__nv_bfloat16>(q, k, v, o, n, heads, group, d, s);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace h3::cuda

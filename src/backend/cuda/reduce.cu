// The rank-ordered sum behind the NCCL communicator's reduce-scatter and all-reduce: out[i] = parts[0][i] +
// parts[1][i] + ... in rank order, the same additions as the host transport makes (bf16 summed in f32, rounded
// once), so both transports give the same bits.
#include <cuda_bf16.h>

#include "backend/cuda/reduce.h"

namespace h3::cuda {
namespace {

template <typename T, typename Acc>
__global__ void sum_blocks_kernel(const T* parts, int n, int64_t count, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  Acc acc = static_cast<Acc>(parts[i]);
  for (int j = 1; j < n; ++j) acc += static_cast<Acc>(parts[j * count + i]);
  out[i] = static_cast<T>(acc);
}

__global__ void sum_blocks_bf16_kernel(const __nv_bfloat16* parts, int n, int64_t count, __nv_bfloat16* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= count) return;
  float acc = __bfloat162float(parts[i]);
  for (int j = 1; j < n; ++j) acc += __bfloat162float(parts[j * count + i]);
  out[i] = __float2bfloat16_rn(acc);
}

}  // namespace

cudaError_t sum_blocks(const void* parts, ElemType t, int n, int64_t count, void* out, cudaStream_t s) {
  if (count == 0) return cudaSuccess;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((count + threads - 1) / threads);
  switch (t) {
    case ElemType::f32:
      sum_blocks_kernel<float, float>
          <<<blocks, threads, 0, s>>>(static_cast<const float*>(parts), n, count, static_cast<float*>(out));
      break;
    case ElemType::f64:
      sum_blocks_kernel<double, double>
          <<<blocks, threads, 0, s>>>(static_cast<const double*>(parts), n, count, static_cast<double*>(out));
      break;
    case ElemType::i64:
      sum_blocks_kernel<long long, long long>
          <<<blocks, threads, 0, s>>>(static_cast<const long long*>(parts), n, count, static_cast<long long*>(out));
      break;
    case ElemType::bf16:
      sum_blocks_bf16_kernel<<<blocks, threads, 0, s>>>(static_cast<const __nv_bfloat16*>(parts), n, count,
                                                        static_cast<__nv_bfloat16*>(out));
      break;
    default:
      return cudaErrorInvalidValue;
  }
  return cudaGetLastError();
}

}  // namespace h3::cuda

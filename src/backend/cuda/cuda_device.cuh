// Device-side helpers shared by the CUDA backend's kernel files (cuda_kernels.cu, cuda_vae_kernels.cu,
// cuda_text_kernels.cu): bf16 rounding, typed loads and stores through f32, warp and block sums, and the f32/bf16
// dispatch of a launcher. Internal to src/backend/cuda.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_kernels.h"

namespace h3::cuda {

// Rounds through bf16 (the released recipe's intermediate storage).
__device__ __forceinline__ float rb(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// Element i of an f32 or bf16 buffer as f32, and back (round to nearest even).
template <typename T> __device__ __forceinline__ float ld(const T* p, int64_t i);
template <> __device__ __forceinline__ float ld<float>(const float* p, int64_t i) { return p[i]; }
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <typename T> __device__ __forceinline__ void st(T* p, int64_t i, float v);
template <> __device__ __forceinline__ void st<float>(float* p, int64_t i, float v) { p[i] = v; }
template <> __device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// Sum over the 32 lanes of a warp (butterfly order; every lane gets it).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Sum of v over the block, every thread gets it; `scratch` holds 32 floats. Safe to call repeatedly.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  __syncthreads();  // scratch may still be read from the previous call
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < (blockDim.x + 31) / 32 ? scratch[threadIdx.x] : 0.f;
    w = warp_sum(w);
    if (threadIdx.x == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

// Calls f(T{}) for the two activation types (float, __nv_bfloat16); other types are refused.
template <typename F>
cudaError_t by_type(ElemType t, F f) {
  if (t == ElemType::f32) f(float{});
  else if (t == ElemType::bf16) f(__nv_bfloat16{});
  else return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace h3::cuda

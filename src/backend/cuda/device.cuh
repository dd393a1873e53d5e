// Device-side helpers shared by the CUDA backend's kernel files (backend/cuda/*.cu, backend/cuda/attention/causal.cu,
// backend/cuda/attention/simple.cu): bf16 rounding, typed loads and stores through f32, warp and block sums, and the
// f32/bf16 dispatch of a launcher. Internal to src/backend/cuda.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// Rounds through bf16 (the released recipe's intermediate storage).
__device__ __forceinline__ float rb(float v) {
  return __bfloat162float(__float2bfloat16_rn(v));
}

// Element i of an f32 or bf16 buffer as f32, and back (round to nearest even).
template <typename T>
__device__ __forceinline__ float ld(const T* p, int64_t i);
template <>
__device__ __forceinline__ float ld<float>(const float* p, int64_t i) {
  return p[i];
}
template <>
__device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16* p, int64_t i) {
  return __bfloat162float(p[i]);
}
template <typename T>
__device__ __forceinline__ void st(T* p, int64_t i, float v);
template <>
__device__ __forceinline__ void st<float>(float* p, int64_t i, float v) {
  p[i] = v;
}
template <>
__device__ __forceinline__ void st<__nv_bfloat16>(__nv_bfloat16* p, int64_t i, float v) {
  p[i] = __float2bfloat16_rn(v);
}

// Sum over the 32 lanes of a warp (butterfly order; every lane gets it).
__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Max over the 32 lanes of a warp (every lane gets it).
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// The warp reduction WarpOp (warp_sum, warp_max) of v over the block: each warp's result, then the warp results
// reduced by the first warp; every thread gets it. `scratch` holds 32 floats; safe to call repeatedly, also after
// another reduction on the same scratch.
template <float (*WarpOp)(float)>
__device__ __forceinline__ float block_reduce(float v, float* scratch) {
  v = WarpOp(v);
  __syncthreads();  // scratch may still be read from the previous call
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = v;
  __syncthreads();
  if (threadIdx.x < 32) {
    float w = threadIdx.x < (blockDim.x + 31) / 32 ? scratch[threadIdx.x] : 0.f;
    w = WarpOp(w);
    if (threadIdx.x == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}

// Sum of v over the block, and max of v >= 0 (|values|: the first warp's lanes past the block's warps hold 0).
__device__ __forceinline__ float block_sum(float v, float* scratch) {
  return block_reduce<warp_sum>(v, scratch);
}
__device__ __forceinline__ float block_max(float v, float* scratch) {
  return block_reduce<warp_max>(v, scratch);
}

// The first element of this block's group when one block handles each (row, group) of rows of `cols` values cut
// into groups of `group`.
__device__ __forceinline__ int64_t row_group_base(int64_t cols, int64_t group) {
  const int64_t groups = cols / group;
  return (blockIdx.x / groups) * cols + (blockIdx.x % groups) * group;
}

// 1 / sqrt(mean(x^2) + eps) of the n values x[base, base + n), every thread gets it: threads stride over the values,
// `scratch` holds 32 floats.
template <typename T>
__device__ __forceinline__ float block_rms_inverse(const T* x, int64_t base, int64_t n, float eps, float* scratch) {
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < n; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  return 1.0f / sqrtf(block_sum(ss, scratch) / static_cast<float>(n) + eps);
}

// Folds the block's largest non-negative value into *amax (zeroed before the launch): one atomic per block.
// Non-negative floats order like their bit patterns, so an integer atomicMax on the bits is a float max. Every
// thread of the block must call it.
__device__ __forceinline__ void block_max_into(float v, float* amax, float* scratch) {
  v = block_max(v, scratch);
  if (threadIdx.x == 0) atomicMax(reinterpret_cast<unsigned int*>(amax), __float_as_uint(v));
}

// Eight bf16 values as raw bits (one 16-byte access), as floats, and back (round to nearest even).
__device__ __forceinline__ uint4 load_raw(const __nv_bfloat16* p) {
  return *reinterpret_cast<const uint4*>(p);
}
__device__ __forceinline__ void unpack(const uint4& raw, float (&v)[8]) {
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    v[2 * i] = f.x;
    v[2 * i + 1] = f.y;
  }
}
__device__ __forceinline__ uint4 pack(const float (&v)[8]) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(v[2 * i], v[2 * i + 1]);
  return raw;
}

// Calls f(T{}) for the two activation types (float, __nv_bfloat16); other types are refused.
template <typename F>
cudaError_t by_type(ElemType t, F f) {
  if (t == ElemType::f32)
    f(float{});
  else if (t == ElemType::bf16)
    f(__nv_bfloat16{});
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace h3::cuda

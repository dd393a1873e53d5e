// Launch helpers and the 16-byte bf16 accesses shared by the element-wise kernel files (backend/cuda/*.cu):
// the block size, grid sizing, the grid-stride loops (by element, by row and column, by 16-byte chunk) and the
// launches of their kernels, alignment checks, eight bf16 values as floats, and the rounding of a value to the storage
// type T. Internal to src/backend/cuda.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "backend/cuda/device.cuh"

namespace h3::cuda {

namespace {

constexpr int kThreads = 256;

inline int blocks_for(int64_t n, int per_block = kThreads) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<int>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

// A grid-stride loop of i over [0, n): the element-wise kernels' one output element per iteration.
#define H3_GRID_LOOP(i, n)                                                               \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The same loop over a [rows, cols] tensor: f(i, r, c) for element i = r * cols + c.
template <typename F>
__device__ __forceinline__ void for_each_row_col(int64_t rows, int64_t cols, F f) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    f(i, i / cols, i % cols);
}

// The same over the 16-byte chunks of a [rows, cols] bf16 tensor (cols % 8 == 0): f(e, r, c) for the chunk of
// elements [e, e + 8), row r, columns [c, c + 8). The chunk's row takes one division in I: uint32_t whenever the
// tensor has fewer than 2^31 elements (64-bit division is a long software sequence that costs more than the memory
// traffic).
template <typename I, typename F>
__device__ __forceinline__ void for_each_row_chunk(int64_t rows, int64_t cols, F f) {
  const I n8 = static_cast<I>(rows * cols / 8), per_row = static_cast<I>(cols / 8);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n8; i += I(gridDim.x) * blockDim.x) {
    const I r = i / per_row;
    f(int64_t(i) * 8, r, (i - r * per_row) * 8);
  }
}

// Launches a kernel of for_each_row_chunk over n bf16 elements, one thread a chunk of 8: its instantiation for a
// uint32_t index, k32, below 2^31 elements, else k64. Each argument is passed as the kernel's parameter type (a
// launcher's void* buffers as the kernel's bf16 pointers).
template <typename... P, typename... A>
cudaError_t launch_chunks(void (*k32)(P...), void (*k64)(P...), int64_t n, cudaStream_t s, A... args) {
  (n < (int64_t(1) << 31) ? k32 : k64)<<<blocks_for(n / 8), kThreads, 0, s>>>(static_cast<P>(args)...);
  return cudaGetLastError();
}

// Launches an element-wise kernel, its f32 instantiation or its bf16 one as by_type picks them for the activation type
// t (others refused), with one thread an element of n; nothing when n == 0. Arguments as in launch_chunks.
template <typename... PF, typename... PB, typename... A>
cudaError_t launch_elements(ElemType t, int64_t n, cudaStream_t s, void (*f32)(PF...), void (*bf16)(PB...), A... args) {
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    if constexpr (std::is_same_v<decltype(tag), float>)
      f32<<<blocks_for(n), kThreads, 0, s>>>(static_cast<PF>(args)...);
    else
      bf16<<<blocks_for(n), kThreads, 0, s>>>(static_cast<PB>(args)...);
  });
}

struct Bf8 {
  float v[8];
};

__device__ __forceinline__ Bf8 load8(const __nv_bfloat16* p) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
  Bf8 r;
  for (int i = 0; i < 4; ++i) {
    const float2 f = __bfloat1622float2(h[i]);
    r.v[2 * i] = f.x;
    r.v[2 * i + 1] = f.y;
  }
  return r;
}

__device__ __forceinline__ void store8(__nv_bfloat16* p, const Bf8& r) {
  uint4 raw;
  __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
  for (int i = 0; i < 4; ++i) h[i] = __floats2bfloat162_rn(r.v[2 * i], r.v[2 * i + 1]);
  *reinterpret_cast<uint4*>(p) = raw;
}

inline bool aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

template <typename T>
__device__ __forceinline__ float round_to(float v);
template <>
__device__ __forceinline__ float round_to<float>(float v) {
  return v;
}
template <>
__device__ __forceinline__ float round_to<__nv_bfloat16>(float v) {
  return rb(v);
}

}  // namespace

}  // namespace h3::cuda

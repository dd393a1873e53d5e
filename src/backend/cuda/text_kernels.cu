// Kernels of the Qwen3-VL towers (declared in backend/cuda/text_kernels.h).
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "backend/cuda/device.cuh"
#include "backend/cuda/text_kernels.h"

namespace h3::cuda {

namespace {

constexpr int kThreads = 256;

// One block per (row, group); threads stride over the group.
template <typename T>
__global__ void rms_norm_rounded_kernel(const T* x, const T* w, T* y, int64_t cols, int64_t group, float eps) {
  const int64_t base = row_group_base(cols, group);
  __shared__ float partial[32];
  const float inv = block_rms_inverse(x, base, group, eps, partial);
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    T normed;
    st(&normed, 0, ld(x, base + c) * inv);  // rounded to T: transformers' hidden_states.to(input_dtype)
    st(y, base + c, ld(&normed, 0) * ld(w, c));
  }
}

template <typename T>
__global__ void gelu_kernel(const T* x, T* out, int64_t n, bool tanh_form) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ld(x, i);
    float r;
    if (tanh_form) {
      const float k = 0.7978845608028654f;  // sqrt(2 / pi)
      r = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v)));
    } else {
      r = 0.5f * v * (1.0f + erff(v * 0.7071067811865476f));
    }
    st(out, i, r);
  }
}

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

}  // namespace

cudaError_t rms_norm_rounded(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols,
                             int64_t group, float eps, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  if (group <= 0 || cols % group) return cudaErrorInvalidValue;
  const int64_t blocks = rows * (cols / group);
  if (blocks > 0x7fffffffLL) return cudaErrorInvalidValue;
  // The thread count of kernels.cu's rms_norm: the same sums, so f32 results are bitwise rms_norm's.
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_rounded_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), cols, group, eps);
  });
}

cudaError_t gelu(const void* x, void* out, ElemType t, int64_t n, bool tanh_form, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    gelu_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(out), n, tanh_form);
  });
}

}  // namespace h3::cuda

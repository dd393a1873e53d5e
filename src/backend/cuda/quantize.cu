// FP8 e4m3 quantization (backend/cuda/quantize.h): per tensor (absmax, then the division by the scale), with a
// fixed scale, per row (a row kernel, backend/cuda/row.cuh), and back to bf16. Built with --fmad=false, so that a*b+c
// rounds twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/quantize.h"
#include "backend/cuda/row.cuh"
#include "ops/fp8_bound.h"

namespace h3::cuda {

namespace {

template <typename T>
__global__ void absmax_kernel(const T* x, int64_t n, float* amax) {
  __shared__ float scratch[32];
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    m = fmaxf(m, fabsf(ld(x, i)));
  block_max_into(m, amax, scratch);
}

template <typename T>
__global__ void quantize_fp8_kernel(const T* x, int64_t n, const float* amax, __nv_fp8_e4m3* y, float* scale_out) {
  const float scale = fmaxf(*amax / 448.0f, 1e-12f);
  if (blockIdx.x == 0 && threadIdx.x == 0 && scale_out) *scale_out = scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __nv_fp8_e4m3(ld(x, i) / scale);
}

// The same two kernels for bf16, 8 values a thread (one 16-byte load; an 8-byte store of fp8): bitwise the scalar
// ones (the same division and conversion), at several times their bandwidth on the DiT's [S, 14336] activations.
__global__ void absmax_bf16x8_kernel(const uint4* x, int64_t n8, float* amax) {
  __shared__ float scratch[32];
  float m = 0.f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    float v[8];
    unpack(x[i], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));
  }
  block_max_into(m, amax, scratch);
}

__global__ void quantize_fp8_bf16x8_kernel(const uint4* x, int64_t n8, const float* amax, uint2* y, float* scale_out) {
  const float scale = fmaxf(*amax / 448.0f, 1e-12f);
  if (blockIdx.x == 0 && threadIdx.x == 0 && scale_out) *scale_out = scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    const uint4 raw = x[i];
    const auto* b = reinterpret_cast<const __nv_bfloat16*>(&raw);
    uint2 out;
    auto* q = reinterpret_cast<__nv_fp8x2_storage_t*>(&out);
#pragma unroll
    for (int j = 0; j < 4; ++j)
      q[j] = __nv_cvt_float2_to_fp8x2(
          make_float2(__bfloat162float(b[2 * j]) / scale, __bfloat162float(b[2 * j + 1]) / scale), __NV_SATFINITE,
          __NV_E4M3);
    y[i] = out;
  }
}

__global__ void dequantize_fp8_kernel(const __nv_fp8_e4m3* x, int64_t n, const float* scale, __nv_bfloat16* y) {
  const float sc = *scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __float2bfloat16_rn(static_cast<float>(x[i]) * sc);
}

// The same, 8 values a thread: one 8-byte load and one 16-byte store (x 8-byte and y 16-byte aligned, n8 = n / 8).
__global__ void dequantize_fp8x8_kernel(const uint2* x, int64_t n8, const float* scale, uint4* y) {
  const float sc = *scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n8; i += int64_t(gridDim.x) * blockDim.x) {
    const uint2 in = x[i];
    const auto* f = reinterpret_cast<const __nv_fp8_e4m3*>(&in);
    uint4 out;
    auto* b = reinterpret_cast<__nv_bfloat16*>(&out);
#pragma unroll
    for (int j = 0; j < 8; ++j) b[j] = __float2bfloat16_rn(static_cast<float>(f[j]) * sc);
    y[i] = out;
  }
}

template <typename T>
__global__ void quantize_fp8_fixed_kernel(const T* x, int64_t n, const float* scale, __nv_fp8_e4m3* y) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __nv_fp8_e4m3(ld(x, i) / s);
}

// Per-row FP8 quantization of bf16 rows (one block per row).
template <int VPT>
__global__ void __launch_bounds__(256)
    quantize_rows_kernel(const __nv_bfloat16* __restrict__ x, RowOut out, int64_t cols) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, base = r * cols, chunks = cols / 8;
  bool live[VPT];
  uint4 h[VPT];
  load_row<VPT>(x + base, chunks, h, live);
  write_row<VPT>(out, r, cols, h, live, scratch);
}

__global__ void broadcast_scale_kernel(const float* scale, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = *scale;
}

__global__ void dequantize_rows_kernel(const __nv_fp8_e4m3* q, const float* scales, __nv_bfloat16* out, int64_t rows,
                                       int64_t cols) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    out[i] = __float2bfloat16_rn(static_cast<float>(q[i]) * scales[i / cols]);
}

}  // namespace

cudaError_t quantize_fp8_fixed(const void* x, ElemType t, int64_t n, const float* scale, void* y, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    quantize_fp8_fixed_kernel<T>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), n, scale, static_cast<__nv_fp8_e4m3*>(y));
  });
}

cudaError_t absmax(const void* x, ElemType t, int64_t n, float* amax, cudaStream_t s) {
  cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s);
  if (e != cudaSuccess || n == 0) return e;
  if (t == ElemType::bf16 && n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
    const int grid = std::min(blocks_for(n / 8, 4 * kThreads), 132 * 16);
    absmax_bf16x8_kernel<<<grid, kThreads, 0, s>>>(static_cast<const uint4*>(x), n / 8, amax);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    const int grid = std::min(blocks_for(n, 8 * kThreads), 2048);
    absmax_kernel<T><<<grid, kThreads, 0, s>>>(static_cast<const T*>(x), n, amax);
  });
}

cudaError_t quantize_fp8(const void* x, ElemType t, int64_t n, const float* amax, void* y, float* scale_out,
                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (t == ElemType::bf16 && n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
      reinterpret_cast<uintptr_t>(y) % 8 == 0) {
    const int grid = std::min(blocks_for(n / 8, 2 * kThreads), 132 * 16);
    quantize_fp8_bf16x8_kernel<<<grid, kThreads, 0, s>>>(static_cast<const uint4*>(x), n / 8, amax,
                                                         static_cast<uint2*>(y), scale_out);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    quantize_fp8_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), n, amax,
                                                              static_cast<__nv_fp8_e4m3*>(y), scale_out);
  });
}

cudaError_t dequantize_fp8(const void* x, int64_t n, const float* scale, void* y, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (n % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 8 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0)
    dequantize_fp8x8_kernel<<<blocks_for(n / 8), kThreads, 0, s>>>(static_cast<const uint2*>(x), n / 8, scale,
                                                                   static_cast<uint4*>(y));
  else
    dequantize_fp8_kernel<<<blocks_for(n), kThreads, 0, s>>>(static_cast<const __nv_fp8_e4m3*>(x), n, scale,
                                                             static_cast<__nv_bfloat16*>(y));
  return cudaGetLastError();
}

cudaError_t broadcast_scale(const float* scale, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  const int64_t blocks = (n + 255) / 256;
  broadcast_scale_kernel<<<static_cast<unsigned>(blocks < 4096 ? blocks : 4096), 256, 0, s>>>(scale, out, n);
  return cudaGetLastError();
}

cudaError_t dequantize_rows_fp8(const void* q, const float* scales, void* out, int64_t rows, int64_t cols,
                                cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  const int64_t blocks = (rows * cols + 255) / 256;
  dequantize_rows_kernel<<<static_cast<unsigned>(blocks < 65536 ? blocks : 65536), 256, 0, s>>>(
      static_cast<const __nv_fp8_e4m3*>(q), scales, static_cast<__nv_bfloat16*>(out), rows, cols);
  return cudaGetLastError();
}

cudaError_t quantize_rows_fp8(const void* x, void* q, float* scales, int64_t rows, int64_t cols, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const RowShape rs = row_shape(cols / 8);
  if (cols % 8 || !rs.vpt || !aligned16(x) || !aligned16(q) || !scales) return cudaErrorNotSupported;
  const RowOut o = row_out(nullptr, q, scales);
  return by_vpt(rs.vpt, [&]<int V>() {
    quantize_rows_kernel<V>
        <<<static_cast<unsigned>(rows), rs.threads, 0, s>>>(static_cast<const __nv_bfloat16*>(x), o, cols);
  });
}

}  // namespace h3::cuda

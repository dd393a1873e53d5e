// The convolution family (backend/cuda/conv.h): direct 1-D convolutions and transposed convolutions, im2col and its
// inverse for a dense 1-D convolution run as a GEMM, and 1-D padding. Direct convolutions add their terms in the CPU
// backend's order (input channel, then tap); built with --fmad=false like the other kernels, so a*b+c rounds twice as
// on the CPU backend.
#include <cuda_bf16.h>

#include <cstdint>

#include "backend/cuda/conv.h"
#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"

namespace h3::cuda {

namespace {

template <typename T>
__global__ void conv1d_direct_kernel(const T* x, const T* w, const T* bias, T* y, int64_t C, int64_t L, int64_t O,
                                     int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t dil, int64_t groups,
                                     int64_t n) {
  const int64_t cpg = C / groups, opg = O / groups;
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, bo = idx / Lo, o = bo % O, b = bo / O, g = o / opg;
    float acc = 0.f;
    for (int64_t cl = 0; cl < cpg; ++cl) {
      const T* row = x + (b * C + g * cpg + cl) * L;
      const T* wr = w + (o * cpg + cl) * K;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = j * stride + k * dil - pad;
        if (i >= 0 && i < L) acc += ld(wr, k) * ld(row, i);
      }
    }
    if (bias) acc += ld(bias, o);
    st(y, idx, acc);
  }
}

template <typename T>
__global__ void im2col_kernel(const T* x, T* cols, int64_t C, int64_t L, int64_t K, int64_t Lo, int64_t stride,
                              int64_t pad, int64_t dil, int64_t n) {
  const int64_t CK = C * K;
  H3_GRID_LOOP(idx, n) {
    const int64_t row = idx / CK, ck = idx % CK, c = ck / K, k = ck % K, b = row / Lo, j = row % Lo;
    const int64_t i = j * stride + k * dil - pad;
    cols[idx] = (i >= 0 && i < L) ? x[(b * C + c) * L + i] : T(0.f);
  }
}

template <typename T>
__global__ void rows_to_channels_kernel(const T* rows, T* y, int64_t O, int64_t Lo, int64_t n) {
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, o = (idx / Lo) % O, b = idx / (Lo * O);
    y[idx] = rows[(b * Lo + j) * O + o];
  }
}

template <typename T>
__global__ void conv_transpose1d_kernel(const T* x, const T* w, const T* bias, T* y, int64_t C, int64_t L, int64_t O,
                                        int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t groups, int64_t n) {
  const int64_t cpg = C / groups, opg = O / groups;
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, bo = idx / Lo, o = bo % O, b = bo / O, g = o / opg, ol = o % opg;
    // Output j takes input i through tap k when i*stride + k - pad = j: k = (j + pad) mod stride, + stride, ...
    const int64_t k0 = (j + pad) % stride;
    float acc = 0.f;
    for (int64_t cl = 0; cl < cpg; ++cl) {
      const int64_t c = g * cpg + cl;
      const T* row = x + (b * C + c) * L;
      const T* wr = w + (c * opg + ol) * K;
      for (int64_t k = k0; k < K; k += stride) {
        const int64_t i = (j + pad - k) / stride;
        if (j + pad - k >= 0 && i < L) acc += ld(wr, k) * ld(row, i);
      }
    }
    if (bias) acc += ld(bias, o);
    st(y, idx, acc);
  }
}

__device__ __forceinline__ int64_t pad_index(int64_t p, int64_t n, int mode) {
  if (p >= 0 && p < n) return p;
  if (mode == 0) return -1;
  if (mode == 2) return p < 0 ? 0 : n - 1;
  return p < 0 ? -p : 2 * (n - 1) - p;
}

template <typename T>
__global__ void pad1d_kernel(const T* x, T* y, int64_t L, int64_t left, int64_t Lo, int mode, int64_t n) {
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, r = idx / Lo;
    const int64_t sj = pad_index(j - left, L, mode);
    y[idx] = sj < 0 ? T(0.f) : x[r * L + sj];
  }
}

}  // namespace

cudaError_t conv1d_direct(const void* x, const void* w, const void* bias, void* y, ElemType t, int64_t B, int64_t C,
                          int64_t L, int64_t O, int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t dilation,
                          int64_t groups, cudaStream_t s) {
  const int64_t n = B * O * Lo;
  return launch_elements(t, n, s, conv1d_direct_kernel<float>, conv1d_direct_kernel<__nv_bfloat16>, x, w, bias, y, C, L,
                         O, K, Lo, stride, pad, dilation, groups, n);
}

cudaError_t conv1d_im2col(const void* x, void* cols, ElemType t, int64_t B, int64_t C, int64_t L, int64_t K, int64_t Lo,
                          int64_t stride, int64_t pad, int64_t dilation, cudaStream_t s) {
  const int64_t n = B * Lo * C * K;
  return launch_elements(t, n, s, im2col_kernel<float>, im2col_kernel<__nv_bfloat16>, x, cols, C, L, K, Lo, stride, pad,
                         dilation, n);
}

cudaError_t rows_to_channels(const void* rows, void* y, ElemType t, int64_t B, int64_t O, int64_t Lo, cudaStream_t s) {
  const int64_t n = B * O * Lo;
  return launch_elements(t, n, s, rows_to_channels_kernel<float>, rows_to_channels_kernel<__nv_bfloat16>, rows, y, O,
                         Lo, n);
}

cudaError_t conv_transpose1d(const void* x, const void* w, const void* bias, void* y, ElemType t, int64_t B, int64_t C,
                             int64_t L, int64_t O, int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t groups,
                             cudaStream_t s) {
  const int64_t n = B * O * Lo;
  return launch_elements(t, n, s, conv_transpose1d_kernel<float>, conv_transpose1d_kernel<__nv_bfloat16>, x, w, bias, y,
                         C, L, O, K, Lo, stride, pad, groups, n);
}

cudaError_t pad1d(const void* x, void* y, ElemType t, int64_t rows, int64_t L, int64_t left, int64_t right, int mode,
                  cudaStream_t s) {
  const int64_t Lo = L + left + right, n = rows * Lo;
  return launch_elements(t, n, s, pad1d_kernel<float>, pad1d_kernel<__nv_bfloat16>, x, y, L, left, Lo, mode, n);
}

}  // namespace h3::cuda

// The element-wise family (backend/cuda/elementwise.h): the AdaLN modulation, the gated residual and the sum (f32 or
// bf16, the bf16 rows of a width in 8s through 16-byte accesses), the LayerScale residual and the divide-and-clamp.
// Built with --fmad=false, so that a*b+c rounds twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/launch.cuh"

namespace h3::cuda {

namespace {

template <typename T>
__global__ void modulate_kernel(const T* h, const T* shift, const T* scale, const int32_t* idx, T* out, int64_t rows,
                                int64_t cols, bool bf) {
  for_each_row_col(rows, cols, [&](int64_t i, int64_t r, int64_t c) {
    const int64_t t = int64_t(idx[r]) * cols + c;
    const float hv = ld(h, i), sc = ld(scale, t), sh = ld(shift, t);
    st(out, i, bf ? rb(rb(hv * rb(1.0f + sc)) + sh) : hv * (1.0f + sc) + sh);
  });
}

template <typename T>
__global__ void gate_residual_kernel(const T* x, const T* gate, const int32_t* idx, const T* y, T* out, int64_t rows,
                                     int64_t cols, bool bf) {
  for_each_row_col(rows, cols, [&](int64_t i, int64_t r, int64_t c) {
    const float g = ld(gate, int64_t(idx[r]) * cols + c), xv = ld(x, i), yv = ld(y, i);
    st(out, i, bf ? rb(xv + rb(g * yv)) : xv + g * yv);
  });
}

template <typename T>
__global__ void add_kernel(const T* x, const T* y, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    st(out, i, ld(x, i) + ld(y, i));
}

// The 16-byte kernels: I is for_each_row_chunk's index type.
template <typename I>
__global__ void modulate_vec(const __nv_bfloat16* h, const __nv_bfloat16* shift, const __nv_bfloat16* scale,
                             const int32_t* idx, __nv_bfloat16* out, int64_t rows, int64_t cols, bool bf) {
  for_each_row_chunk<I>(rows, cols, [&](int64_t e, I r, I c) {
    const int64_t t = int64_t(idx[r]) * cols + c;
    Bf8 a = load8(h + e);
    const Bf8 sc = load8(scale + t), sh = load8(shift + t);
    for (int j = 0; j < 8; ++j)
      a.v[j] = bf ? rb(rb(a.v[j] * rb(1.0f + sc.v[j])) + sh.v[j]) : a.v[j] * (1.0f + sc.v[j]) + sh.v[j];
    store8(out + e, a);
  });
}

template <typename I>
__global__ void gate_residual_vec(const __nv_bfloat16* x, const __nv_bfloat16* gate, const int32_t* idx,
                                  const __nv_bfloat16* y, __nv_bfloat16* out, int64_t rows, int64_t cols, bool bf) {
  for_each_row_chunk<I>(rows, cols, [&](int64_t e, I r, I c) {
    Bf8 a = load8(x + e);
    const Bf8 g = load8(gate + int64_t(idx[r]) * cols + c), b = load8(y + e);
    for (int j = 0; j < 8; ++j) a.v[j] = bf ? rb(a.v[j] + rb(g.v[j] * b.v[j])) : a.v[j] + g.v[j] * b.v[j];
    store8(out + e, a);
  });
}

__global__ void add_vec(const __nv_bfloat16* x, const __nv_bfloat16* y, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 8; i += int64_t(gridDim.x) * blockDim.x) {
    Bf8 a = load8(x + i * 8);
    const Bf8 b = load8(y + i * 8);
    for (int j = 0; j < 8; ++j) a.v[j] += b.v[j];
    store8(out + i * 8, a);
  }
}

}  // namespace

cudaError_t modulate(const void* h, const void* shift, const void* scale, const int32_t* idx, void* out, ElemType t,
                     int64_t rows, int64_t cols, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (t == ElemType::bf16 && cols % 8 == 0 && aligned16({h, shift, scale, out}))
    return launch_chunks(modulate_vec<uint32_t>, modulate_vec<int64_t>, rows * cols, s, h, shift, scale, idx, out, rows,
                         cols, bf);
  return launch_elements(t, rows * cols, s, modulate_kernel<float>, modulate_kernel<__nv_bfloat16>, h, shift, scale,
                         idx, out, rows, cols, bf);
}

cudaError_t gate_residual(const void* x, const void* gate, const int32_t* idx, const void* y, void* out, ElemType t,
                          int64_t rows, int64_t cols, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (t == ElemType::bf16 && cols % 8 == 0 && aligned16({x, gate, y, out}))
    return launch_chunks(gate_residual_vec<uint32_t>, gate_residual_vec<int64_t>, rows * cols, s, x, gate, idx, y, out,
                         rows, cols, bf);
  return launch_elements(t, rows * cols, s, gate_residual_kernel<float>, gate_residual_kernel<__nv_bfloat16>, x, gate,
                         idx, y, out, rows, cols, bf);
}

cudaError_t add(const void* x, const void* y, void* out, ElemType t, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (t == ElemType::bf16 && n % 8 == 0 && aligned16({x, y, out})) {
    using B = __nv_bfloat16;
    add_vec<<<blocks_for(n / 8), kThreads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(y),
                                                   static_cast<B*>(out), n);
    return cudaGetLastError();
  }
  return launch_elements(t, n, s, add_kernel<float>, add_kernel<__nv_bfloat16>, x, y, out, n);
}

namespace {

template <typename TX, typename TY>
__global__ void add_scaled_kernel(const TX* x, const TY* y, const TX* scale, TX* out, int64_t cols, int64_t n) {
  H3_GRID_LOOP(idx, n) st(out, idx, ld(x, idx) + ld(y, idx) * ld(scale, idx % cols));
}

template <typename T>
__global__ void divide_clamp_kernel(const T* x, T* y, float d, float lo, float hi, int64_t n) {
  H3_GRID_LOOP(idx, n) st(y, idx, fminf(hi, fmaxf(lo, ld(x, idx) / d)));
}

}  // namespace

cudaError_t add_scaled(const void* x, const void* y, const void* scale, void* out, ElemType tx, ElemType ty,
                       int64_t rows, int64_t cols, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  using B = __nv_bfloat16;
  if (tx == ElemType::f32 && ty == ElemType::f32)
    add_scaled_kernel<float, float>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<const float*>(y),
                                            static_cast<const float*>(scale), static_cast<float*>(out), cols, n);
  else if (tx == ElemType::f32 && ty == ElemType::bf16)
    add_scaled_kernel<float, B>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<const B*>(y),
                                            static_cast<const float*>(scale), static_cast<float*>(out), cols, n);
  else if (tx == ElemType::bf16 && ty == ElemType::bf16)
    add_scaled_kernel<B, B><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(y),
                                                               static_cast<const B*>(scale), static_cast<B*>(out), cols,
                                                               n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

cudaError_t divide_clamp(const void* x, void* y, ElemType t, int64_t n, float divisor, float lo, float hi,
                         cudaStream_t s) {
  return launch_elements(t, n, s, divide_clamp_kernel<float>, divide_clamp_kernel<__nv_bfloat16>, x, y, divisor, lo, hi,
                         n);
}

}  // namespace h3::cuda

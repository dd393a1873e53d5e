// The activations (backend/cuda/activations.h): SiLU and SwiGLU (the generic f32/bf16 kernels, the 16-byte bf16 path,
// and the bf16 row kernels of backend/cuda/row.cuh with their per-row FP8 output), GELU and SnakeBeta. Built with
// --fmad=false, so that a*b+c rounds twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/activations.h"
#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/row.cuh"

namespace h3::cuda {

namespace {

template <typename T>
__global__ void silu_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ld(x, i);
    st(out, i, v / (1.0f + expf(-v)));
  }
}

template <typename T>
__global__ void swiglu_kernel(const T* u, T* out, int64_t rows, int64_t f, bool bf) {
  for_each_row_col(rows, f, [&](int64_t i, int64_t r, int64_t j) {
    const float value = ld(u, r * 2 * f + j), g = ld(u, r * 2 * f + f + j);
    const float s = g / (1.0f + expf(-g));
    st(out, i, bf ? rb(value * rb(s)) : value * s);
  });
}

template <typename I>
__global__ void swiglu_vec(const __nv_bfloat16* u, __nv_bfloat16* out, int64_t rows, int64_t f, bool bf) {
  for_each_row_chunk<I>(rows, f, [&](int64_t e, I r, I j) {
    Bf8 value = load8(u + int64_t(r) * 2 * f + j);
    const Bf8 g = load8(u + int64_t(r) * 2 * f + f + j);
    for (int k = 0; k < 8; ++k) {
      const float sg = g.v[k] / (1.0f + expf(-g.v[k]));
      value.v[k] = bf ? rb(value.v[k] * rb(sg)) : value.v[k] * sg;
    }
    store8(out + e, value);
  });
}

// One 16-byte chunk of SwiGLU with bf16 steps, h = rb(v rb(silu(g))), as bf16 pairs: silu in f32 (fast exp and
// division), rounded to a bf16 pair, times v's pair (a bf16 pair product is the bf16 rounding of the exact product,
// i.e. rb() of the f32 one: the same bits); the running max |h| as a bf16 pair (exact).
__device__ __forceinline__ void swiglu_chunk_bf16(const uint4& vr, const uint4& gr, uint4& h, __nv_bfloat162& m2) {
  float g[8];
  unpack(gr, g);
  const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&vr);
  __nv_bfloat162* h2 = reinterpret_cast<__nv_bfloat162*>(&h);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float s0 = __fdividef(g[2 * i], 1.0f + __expf(-g[2 * i]));
    const float s1 = __fdividef(g[2 * i + 1], 1.0f + __expf(-g[2 * i + 1]));
    h2[i] = __hmul2_rn(v2[i], __floats2bfloat162_rn(s0, s1));
    m2 = __hmax2(m2, __habs2(h2[i]));
  }
}

// SwiGLU of one row (u = [value | gate], f values each) into per-row FP8 (one block per row). With bf16 steps (the
// DiT's) in bf16 pairs, the row's max taken on the way: fewer instructions than the f32-then-round steps, the same
// bits, less time (docs/notes.md, "2026-12-06 (rooms)").
template <int VPT>
__global__ void __launch_bounds__(256, 3)
    swiglu_rows_kernel(const __nv_bfloat16* __restrict__ u, RowOut out, int64_t f, bool bf) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, chunks = f / 8;
  const __nv_bfloat16* row = u + r * 2 * f;
  bool live[VPT];
  uint4 vraw[VPT], graw[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    live[k] = c < chunks;
    if (live[k]) {
      vraw[k] = load_raw(row + c * 8);
      graw[k] = load_raw(row + f + c * 8);
    }
  }
  uint4 h[VPT];
  if (bf) {
    __nv_bfloat162 m2 = __floats2bfloat162_rn(0.f, 0.f);
#pragma unroll
    for (int k = 0; k < VPT; ++k)
      if (live[k]) swiglu_chunk_bf16(vraw[k], graw[k], h[k], m2);
    write_row<VPT>(out, r, f, h, live, scratch, fmaxf(__low2float(m2), __high2float(m2)));
    return;
  }
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (!live[k]) continue;
    float v[8], g[8];
    unpack(vraw[k], v);
    unpack(graw[k], g);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = v[j] * __fdividef(g[j], 1.0f + __expf(-g[j]));
    h[k] = pack(v);
  }
  write_row<VPT>(out, r, f, h, live, scratch);
}

// SwiGLU into bf16, element-wise over 16-byte chunks; two chunks per thread in flight. Fast exp and division:
// within 2 ulp of f32 before the bf16 rounding, the same on every rank. With `amax` (zeroed by the caller) the
// largest |value| written (after the bf16 rounding: what absmax over `out` would give) is folded into *amax, one
// atomic per block.
template <typename I>
__global__ void swiglu_chunks_kernel(const __nv_bfloat16* __restrict__ u, __nv_bfloat16* __restrict__ out, int64_t rows,
                                     int64_t f, bool bf, float* amax) {
  __shared__ float scratch[32];
  float m = 0.f;
  const I per_row = static_cast<I>(f / 8), n8 = static_cast<I>(rows) * per_row;
  const I stride = I(gridDim.x) * blockDim.x;
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n8; i += 2 * stride) {
    const I i2 = i + stride;
    const bool two = i2 < n8;
    const I r1 = i / per_row, r2 = two ? i2 / per_row : r1;
    const int64_t a1 = int64_t(r1) * 2 * f + int64_t(i - r1 * per_row) * 8;
    const int64_t a2 = int64_t(r2) * 2 * f + int64_t(two ? i2 - r2 * per_row : 0) * 8;
    const uint4 v1 = load_raw(u + a1), g1 = load_raw(u + a1 + f);
    uint4 v2{}, g2{};
    if (two) {
      v2 = load_raw(u + a2);
      g2 = load_raw(u + a2 + f);
    }
    auto one = [&](const uint4& vr, const uint4& gr, I e) {
      float v[8], g[8];
      unpack(vr, v);
      unpack(gr, g);
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const float sg = __fdividef(g[j], 1.0f + __expf(-g[j]));
        v[j] = bf ? rb(v[j] * rb(sg)) : v[j] * sg;
        if (amax) m = fmaxf(m, fabsf(rb(v[j])));
      }
      *reinterpret_cast<uint4*>(out + int64_t(e) * 8) = pack(v);
    };
    one(v1, g1, i);
    if (two) one(v2, g2, i2);
  }
  if (amax) block_max_into(m, amax, scratch);
}

}  // namespace

cudaError_t silu(const void* x, void* out, ElemType t, int64_t n, cudaStream_t s) {
  return launch_elements(t, n, s, silu_kernel<float>, silu_kernel<__nv_bfloat16>, x, out, n);
}

cudaError_t swiglu(const void* u, void* out, ElemType t, int64_t rows, int64_t f, bool bf, cudaStream_t s) {
  if (rows * f == 0) return cudaSuccess;
  if (t == ElemType::bf16 && f % 8 == 0 && aligned16({u, out}))
    return launch_chunks(swiglu_vec<uint32_t>, swiglu_vec<int64_t>, rows * f, s, u, out, rows, f, bf);
  return launch_elements(t, rows * f, s, swiglu_kernel<float>, swiglu_kernel<__nv_bfloat16>, u, out, rows, f, bf);
}

cudaError_t swiglu_bf16(const void* u, void* out, void* q, float* scales, int64_t rows, int64_t f, bool bf16_steps,
                        cudaStream_t s, float* amax) {
  if (amax) {
    const cudaError_t e = cudaMemsetAsync(amax, 0, sizeof(float), s);
    if (e != cudaSuccess) return e;
  }
  if (rows * f == 0) return cudaSuccess;
  if (amax && (q || !out)) return cudaErrorNotSupported;
  if (f % 8 || !aligned16(u) || !aligned16(out) || !aligned16(q) || !(out || q)) return cudaErrorNotSupported;
  using B = __nv_bfloat16;
  if (q) {
    const RowShape rs = row_shape(f / 8);
    if (!rs.vpt || !scales) return cudaErrorNotSupported;
    const RowOut o = row_out(out, q, scales);
    return by_vpt(rs.vpt, [&]<int V>() {
      swiglu_rows_kernel<V>
          <<<static_cast<unsigned>(rows), rs.threads, 0, s>>>(static_cast<const B*>(u), o, f, bf16_steps);
    });
  }
  const int64_t n8 = rows * f / 8;
  const int threads = 256;
  const int64_t want = (n8 + 2 * threads - 1) / (2 * threads);
  const unsigned blocks = static_cast<unsigned>(want < (int64_t(1) << 30) ? want : (int64_t(1) << 30));
  if (n8 < (int64_t(1) << 30))
    swiglu_chunks_kernel<uint32_t>
        <<<blocks, threads, 0, s>>>(static_cast<const B*>(u), static_cast<B*>(out), rows, f, bf16_steps, amax);
  else
    swiglu_chunks_kernel<int64_t>
        <<<blocks, threads, 0, s>>>(static_cast<const B*>(u), static_cast<B*>(out), rows, f, bf16_steps, amax);
  return cudaGetLastError();
}

namespace {

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

template <typename T>
__global__ void snake_beta_kernel(const T* x, const T* alpha, const T* beta, T* y, int64_t C, int64_t L, float gain,
                                  int64_t n) {
  H3_GRID_LOOP(idx, n) {
    const int64_t c = (idx / L) % C;
    const float fa = expf(ld(alpha, c));
    const float inv_b = 1.0f / (expf(ld(beta, c)) + 1e-9f);
    const float u = gain * ld(x, idx);
    const float s = sinf(fa * u);
    st(y, idx, u + inv_b * (s * s));
  }
}

}  // namespace

cudaError_t gelu(const void* x, void* out, ElemType t, int64_t n, bool tanh_form, cudaStream_t s) {
  return launch_elements(t, n, s, gelu_kernel<float>, gelu_kernel<__nv_bfloat16>, x, out, n, tanh_form);
}

cudaError_t snake_beta(const void* x, const void* alpha, const void* beta, void* y, ElemType t, int64_t B, int64_t C,
                       int64_t L, float gain, cudaStream_t s) {
  const int64_t n = B * C * L;
  return launch_elements(t, n, s, snake_beta_kernel<float>, snake_beta_kernel<__nv_bfloat16>, x, alpha, beta, y, C, L,
                         gain, n);
}

}  // namespace h3::cuda

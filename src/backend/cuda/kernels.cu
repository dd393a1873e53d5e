// Element-wise and row kernels of the CUDA backend (declared in backend/cuda/kernels.h). Built with --fmad=false so
// that a*b+c rounds twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/kernels.h"

namespace h3::cuda {

namespace {

constexpr int kThreads = 256;

int blocks_for(int64_t n, int per_block = kThreads) {
  const int64_t b = (n + per_block - 1) / per_block;
  return static_cast<int>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

// ---- conversion ----
__device__ double load_any(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::f32:
      return static_cast<const float*>(p)[i];
    case ElemType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ElemType::f64:
      return static_cast<const double*>(p)[i];
    case ElemType::fp8_e4m3:
      return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(p)[i]);
    case ElemType::i32:
      return static_cast<const int32_t*>(p)[i];
    case ElemType::i64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}
__global__ void convert_kernel(const void* src, ElemType st_, void* dst, ElemType dt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if ((st_ == ElemType::i64 || st_ == ElemType::i32) && (dt == ElemType::i64 || dt == ElemType::i32)) {
      const int64_t v =
          st_ == ElemType::i64 ? static_cast<const int64_t*>(src)[i] : static_cast<const int32_t*>(src)[i];
      if (dt == ElemType::i64)
        static_cast<int64_t*>(dst)[i] = v;
      else
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
      continue;
    }
    const double v = load_any(src, st_, i);
    // Narrow formats round from the f32 value, as the host conversion does.
    const float f = static_cast<float>(v);
    switch (dt) {
      case ElemType::f64:
        static_cast<double*>(dst)[i] = v;
        break;
      case ElemType::f32:
        static_cast<float*>(dst)[i] = f;
        break;
      case ElemType::bf16:
        static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(f);
        break;
      case ElemType::fp8_e4m3:
        static_cast<__nv_fp8_e4m3*>(dst)[i] = __nv_fp8_e4m3(f);
        break;
      case ElemType::i32:
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
        break;
      case ElemType::i64:
        static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v);
        break;
    }
  }
}

// ---- norms and modulation ----
// One block per (row, group); threads stride over the group.
template <typename T>
__global__ void rms_norm_kernel(const T* x, const T* w, T* y, int64_t cols, int64_t group, float eps) {
  const int64_t groups = cols / group;
  const int64_t row = blockIdx.x / groups, g = blockIdx.x % groups;
  const int64_t base = row * cols + g * group;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  __shared__ float partial[32];
  const float inv = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(group) + eps);
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    const float v = ld(x, base + c) * inv;
    st(y, base + c, w ? v * ld(w, c) : v);
  }
}

template <typename T>
__global__ void modulate_kernel(const T* h, const T* shift, const T* scale, const int32_t* idx, T* out, int64_t rows,
                                int64_t cols, bool bf) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols, t = int64_t(idx[r]) * cols + c;
    const float hv = ld(h, i), sc = ld(scale, t), sh = ld(shift, t);
    st(out, i, bf ? rb(rb(hv * rb(1.0f + sc)) + sh) : hv * (1.0f + sc) + sh);
  }
}

template <typename T>
__global__ void gate_residual_kernel(const T* x, const T* gate, const int32_t* idx, const T* y, T* out, int64_t rows,
                                     int64_t cols, bool bf) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    const float g = ld(gate, int64_t(idx[r]) * cols + c), xv = ld(x, i), yv = ld(y, i);
    st(out, i, bf ? rb(xv + rb(g * yv)) : xv + g * yv);
  }
}

template <typename T>
__global__ void add_kernel(const T* x, const T* y, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    st(out, i, ld(x, i) + ld(y, i));
}

template <typename T>
__global__ void silu_kernel(const T* x, T* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const float v = ld(x, i);
    st(out, i, v / (1.0f + expf(-v)));
  }
}

template <typename T>
__global__ void swiglu_kernel(const T* u, T* out, int64_t rows, int64_t f, bool bf) {
  const int64_t n = rows * f;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / f, j = i % f;
    const float value = ld(u, r * 2 * f + j), g = ld(u, r * 2 * f + f + j);
    const float s = g / (1.0f + expf(-g));
    st(out, i, bf ? rb(value * rb(s)) : value * s);
  }
}

template <typename T>
__global__ void rope_kernel(const T* x, const T* cs, const T* sn, T* out, int64_t rows, int64_t cols, int64_t rot,
                            int64_t d, bool bf) {
  const int64_t n = rows * cols, half = rot / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols, j = c % d, head0 = i - j;
    if (j >= rot) {
      st(out, i, ld(x, i));
      continue;
    }
    const float xv = ld(x, i);
    const float other = j < half ? -ld(x, head0 + j + half) : ld(x, head0 + j - half);
    const float cv = ld(cs, r * rot + j), sv = ld(sn, r * rot + j);
    st(out, i, bf ? rb(rb(xv * cv) + rb(other * sv)) : xv * cv + other * sv);
  }
}

// ---- vectorized bf16 paths: 8 values (16 bytes) per thread ----
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
bool aligned16(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  return true;
}

// The 16-byte element-wise kernels find a chunk's row with one division in I: uint32_t whenever the tensor has
// fewer than 2^31 elements (64-bit division is a long software sequence that costs more than the memory traffic).
template <typename I>
__global__ void modulate_vec(const __nv_bfloat16* h, const __nv_bfloat16* shift, const __nv_bfloat16* scale,
                             const int32_t* idx, __nv_bfloat16* out, int64_t rows, int64_t cols, bool bf) {
  const I n8 = static_cast<I>(rows * cols / 8), per_row = static_cast<I>(cols / 8);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n8; i += I(gridDim.x) * blockDim.x) {
    const I r = i / per_row, c = (i - r * per_row) * 8;
    const int64_t e = int64_t(i) * 8, t = int64_t(idx[r]) * cols + c;
    Bf8 a = load8(h + e);
    const Bf8 sc = load8(scale + t), sh = load8(shift + t);
    for (int j = 0; j < 8; ++j)
      a.v[j] = bf ? rb(rb(a.v[j] * rb(1.0f + sc.v[j])) + sh.v[j]) : a.v[j] * (1.0f + sc.v[j]) + sh.v[j];
    store8(out + e, a);
  }
}

template <typename I>
__global__ void gate_residual_vec(const __nv_bfloat16* x, const __nv_bfloat16* gate, const int32_t* idx,
                                  const __nv_bfloat16* y, __nv_bfloat16* out, int64_t rows, int64_t cols, bool bf) {
  const I n8 = static_cast<I>(rows * cols / 8), per_row = static_cast<I>(cols / 8);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n8; i += I(gridDim.x) * blockDim.x) {
    const I r = i / per_row, c = (i - r * per_row) * 8;
    const int64_t e = int64_t(i) * 8;
    Bf8 a = load8(x + e);
    const Bf8 g = load8(gate + int64_t(idx[r]) * cols + c), b = load8(y + e);
    for (int j = 0; j < 8; ++j) a.v[j] = bf ? rb(a.v[j] + rb(g.v[j] * b.v[j])) : a.v[j] + g.v[j] * b.v[j];
    store8(out + e, a);
  }
}

template <typename I>
__global__ void swiglu_vec(const __nv_bfloat16* u, __nv_bfloat16* out, int64_t rows, int64_t f, bool bf) {
  const I n8 = static_cast<I>(rows * f / 8), per_row = static_cast<I>(f / 8);
  for (I i = blockIdx.x * I(blockDim.x) + threadIdx.x; i < n8; i += I(gridDim.x) * blockDim.x) {
    const I r = i / per_row, j = (i - r * per_row) * 8;
    const int64_t e = int64_t(i) * 8;
    Bf8 value = load8(u + int64_t(r) * 2 * f + j);
    const Bf8 g = load8(u + int64_t(r) * 2 * f + f + j);
    for (int k = 0; k < 8; ++k) {
      const float sg = g.v[k] / (1.0f + expf(-g.v[k]));
      value.v[k] = bf ? rb(value.v[k] * rb(sg)) : value.v[k] * sg;
    }
    store8(out + e, value);
  }
}

__global__ void add_vec(const __nv_bfloat16* x, const __nv_bfloat16* y, __nv_bfloat16* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n / 8; i += int64_t(gridDim.x) * blockDim.x) {
    Bf8 a = load8(x + i * 8);
    const Bf8 b = load8(y + i * 8);
    for (int j = 0; j < 8; ++j) a.v[j] += b.v[j];
    store8(out + i * 8, a);
  }
}

// ---- fused kernels ----
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

// One block per row: sum of squares, then norm * w rounded to T, then the modulation.
template <typename T>
__global__ void norm_modulate_kernel(const T* x, const T* w, const T* shift, const T* scale, const int32_t* idx, T* out,
                                     int64_t cols, float eps, bool bf) {
  __shared__ float partial[32];
  const int64_t row = blockIdx.x, base = row * cols, t = int64_t(idx[row]) * cols;
  float ss = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float v = ld(x, base + c);
    ss += v * v;
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float n = round_to<T>((ld(x, base + c) * inv) * ld(w, c));
    const float sc = ld(scale, t + c), sh = ld(shift, t + c);
    st(out, base + c, bf ? rb(rb(n * rb(1.0f + sc)) + sh) : n * (1.0f + sc) + sh);
  }
}

// bf16 rows with cols % 8 == 0: one warp per row, 16-byte accesses (the second pass re-reads the row from L1/L2).
__global__ void norm_modulate_vec(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* shift,
                                  const __nv_bfloat16* scale, const int32_t* idx, __nv_bfloat16* out, int64_t rows,
                                  int64_t cols, float eps, bool bf) {
  const int lane = threadIdx.x & 31;
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + (threadIdx.x >> 5);
  if (row >= rows) return;
  const int64_t base = row * cols, t = int64_t(idx[row]) * cols;
  float ss = 0.f;
#pragma unroll 4
  for (int64_t c = lane * 8; c < cols; c += 32 * 8) {
    const Bf8 a = load8(x + base + c);
    for (int j = 0; j < 8; ++j) ss += a.v[j] * a.v[j];
  }
  const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(cols) + eps);
#pragma unroll 2
  for (int64_t c = lane * 8; c < cols; c += 32 * 8) {
    Bf8 a = load8(x + base + c);
    const Bf8 wv = load8(w + c), sc = load8(scale + t + c), sh = load8(shift + t + c);
    for (int j = 0; j < 8; ++j) {
      const float n = rb((a.v[j] * inv) * wv.v[j]);
      a.v[j] = bf ? rb(rb(n * rb(1.0f + sc.v[j])) + sh.v[j]) : n * (1.0f + sc.v[j]) + sh.v[j];
    }
    store8(out + base + c, a);
  }
}

// One warp per (row, head): the head's d values in shared memory, norm, then rotate-half RoPE on the first rot.
template <typename T>
__global__ void qk_norm_rope_kernel(const T* x, const T* w, const T* cs, const T* sn, T* out, int64_t rows,
                                    int64_t heads, int64_t d, int64_t rot, float eps, bool bf) {
  extern __shared__ float head_vals[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = blockIdx.x * int64_t(blockDim.x / 32) + warp;
  if (item >= rows * heads) return;
  const int64_t row = item / heads, base = item * d, half = rot / 2;
  float* v = head_vals + warp * d;
  float ss = 0.f;
  for (int64_t c = lane; c < d; c += 32) {
    const float a = ld(x, base + c);
    v[c] = a;
    ss += a * a;
  }
  const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t c = lane; c < d; c += 32) v[c] = round_to<T>((v[c] * inv) * ld(w, c));
  __syncwarp();
  for (int64_t c = lane; c < d; c += 32) {
    if (c >= rot) {
      st(out, base + c, v[c]);
      continue;
    }
    const float other = c < half ? -v[c + half] : v[c - half];
    const float cv = ld(cs, row * rot + c), sv = ld(sn, row * rot + c);
    st(out, base + c, bf ? rb(rb(v[c] * cv) + rb(other * sv)) : v[c] * cv + other * sv);
  }
}

// qk_norm_rope for bf16 heads of 128 channels: half a warp per head, each lane owning 8 consecutive channels
// (16-byte accesses); the rotate-half partners come through shared memory.
__global__ void qk_norm_rope_d128(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* cs,
                                  const __nv_bfloat16* sn, __nv_bfloat16* out, int64_t rows, int64_t heads, int64_t rot,
                                  float eps, bool bf) {
  __shared__ float vals[8][128];
  const int half_warp = threadIdx.x >> 4, lane = threadIdx.x & 15;
  const int64_t item = blockIdx.x * int64_t(blockDim.x / 16) + half_warp;
  const bool active = item < rows * heads;
  const int64_t row = active ? item / heads : 0, base = item * 128, half = rot / 2;
  float* v = vals[half_warp];
  const int c0 = lane * 8;
  Bf8 a{};
  if (active) a = load8(x + base + c0);
  const Bf8 wv = load8(w + c0);  // independent of x: in flight together
  float ss = 0.f;
  for (int j = 0; j < 8; ++j) ss += a.v[j] * a.v[j];
  for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);  // within the half warp
  const float inv = 1.0f / sqrtf(ss / 128.0f + eps);
  for (int j = 0; j < 8; ++j) {
    a.v[j] = rb((a.v[j] * inv) * wv.v[j]);
    v[c0 + j] = a.v[j];
  }
  __syncwarp();
  if (!active) return;
  Bf8 o;
  for (int j = 0; j < 8; ++j) {
    const int64_t c = c0 + j;
    if (c >= rot) {
      o.v[j] = a.v[j];
      continue;
    }
    const float other = c < half ? -v[c + half] : v[c - half];
    const float cv = __bfloat162float(cs[row * rot + c]), sv = __bfloat162float(sn[row * rot + c]);
    o.v[j] = bf ? rb(rb(a.v[j] * cv) + rb(other * sv)) : a.v[j] * cv + other * sv;
  }
  store8(out + base + c0, o);
}

// ---- rows ----
template <typename U, bool kScatter>
__global__ void move_rows_kernel(const U* x, const int32_t* idx, U* out, int64_t n, int64_t units) {
  const int64_t total = n * units;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / units, u = i % units, other = idx[r];
    if (kScatter)
      out[other * units + u] = x[i];
    else
      out[i] = x[other * units + u];
  }
}

template <bool kScatter>
cudaError_t move_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  auto go = [&](auto unit) {
    using U = decltype(unit);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    move_rows_kernel<U, kScatter>
        <<<blocks_for(n * units), kThreads, 0, s>>>(static_cast<const U*>(x), idx, static_cast<U*>(out), n, units);
  };
  const auto align = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out);
  if (row_bytes % 16 == 0 && align % 16 == 0)
    go(uint4{});
  else if (row_bytes % 4 == 0 && align % 4 == 0)
    go(uint32_t{});
  else if (row_bytes % 2 == 0)
    go(uint16_t{});
  else
    go(uint8_t{});
  return cudaGetLastError();
}

// ---- attention (simple) ----
template <typename T, int kPer>
__global__ void attention_simple_kernel(const T* q, const T* k, const T* v, T* o, int64_t nq, int64_t nk, int64_t heads,
                                        int64_t d, float scale) {
  const int64_t warp = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / 32;
  const int lane = threadIdx.x & 31;
  if (warp >= nq * heads) return;
  const int64_t i = warp / heads, h = warp % heads, cols = heads * d;
  float qv[kPer], acc[kPer];
  for (int e = 0; e < kPer; ++e) {
    const int64_t c = lane + 32 * e;
    qv[e] = c < d ? ld(q, i * cols + h * d + c) : 0.f;
    acc[e] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
  for (int64_t j = 0; j < nk; ++j) {
    float dot = 0.f;
    for (int e = 0; e < kPer; ++e) {
      const int64_t c = lane + 32 * e;
      if (c < d) dot += qv[e] * ld(k, j * cols + h * d + c);
    }
    const float s = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    for (int e = 0; e < kPer; ++e) {
      const int64_t c = lane + 32 * e;
      acc[e] = acc[e] * corr + (c < d ? p * ld(v, j * cols + h * d + c) : 0.f);
    }
    m = m_new;
  }
  for (int e = 0; e < kPer; ++e) {
    const int64_t c = lane + 32 * e;
    if (c < d) st(o, i * cols + h * d + c, acc[e] / l);
  }
}

// ---- FP8 scaling ----
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

__global__ void attention_fp8_scales_kernel(const float* descale_v, float p_scale, float* scale_s, float* descale_s,
                                            float* scale_o, float* descale_o) {
  *scale_s = p_scale;
  *descale_s = 1.0f / p_scale;
  // 7/8 of the full range: the rounded fp8 softmax weights of a row may sum to a little more than 1.
  const float dv = fmaxf(*descale_v, 1e-30f);
  *scale_o = 0.875f / dv;
  *descale_o = dv / 0.875f;
}

template <typename T>
__global__ void quantize_fp8_fixed_kernel(const T* x, int64_t n, const float* scale, __nv_fp8_e4m3* y) {
  const float s = *scale;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    y[i] = __nv_fp8_e4m3(ld(x, i) / s);
}

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void procedural_kernel(uint64_t base, double scale, double offset, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double u = static_cast<double>(splitmix64(base + static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * 2.0 - 1.0;
    out[i] = static_cast<float>(offset + u * scale);
  }
}

}  // namespace

cudaError_t procedural(uint64_t base, double scale, double offset, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  procedural_kernel<<<blocks_for(n), kThreads, 0, s>>>(base, scale, offset, out, n);
  return cudaGetLastError();
}

cudaError_t convert(const void* src, ElemType st_, void* dst, ElemType dt, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  convert_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, st_, dst, dt, n);
  return cudaGetLastError();
}

cudaError_t rms_norm(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols, int64_t group,
                     float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = rows * (cols / group);
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), cols, group, eps);
  });
}

cudaError_t modulate(const void* h, const void* shift, const void* scale, const int32_t* idx, void* out, ElemType t,
                     int64_t rows, int64_t cols, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (t == ElemType::bf16 && cols % 8 == 0 && aligned16({h, shift, scale, out})) {
    using B = __nv_bfloat16;
    auto kernel = rows * cols < (int64_t(1) << 31) ? modulate_vec<uint32_t> : modulate_vec<int64_t>;
    kernel<<<blocks_for(rows * cols / 8), kThreads, 0, s>>>(static_cast<const B*>(h), static_cast<const B*>(shift),
                                                            static_cast<const B*>(scale), idx, static_cast<B*>(out),
                                                            rows, cols, bf);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    modulate_kernel<T><<<blocks_for(rows * cols), kThreads, 0, s>>>(
        static_cast<const T*>(h), static_cast<const T*>(shift), static_cast<const T*>(scale), idx, static_cast<T*>(out),
        rows, cols, bf);
  });
}

cudaError_t gate_residual(const void* x, const void* gate, const int32_t* idx, const void* y, void* out, ElemType t,
                          int64_t rows, int64_t cols, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (t == ElemType::bf16 && cols % 8 == 0 && aligned16({x, gate, y, out})) {
    using B = __nv_bfloat16;
    auto kernel = rows * cols < (int64_t(1) << 31) ? gate_residual_vec<uint32_t> : gate_residual_vec<int64_t>;
    kernel<<<blocks_for(rows * cols / 8), kThreads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(gate), idx,
                                                            static_cast<const B*>(y), static_cast<B*>(out), rows, cols,
                                                            bf);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    gate_residual_kernel<T>
        <<<blocks_for(rows * cols), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(gate), idx,
                                                      static_cast<const T*>(y), static_cast<T*>(out), rows, cols, bf);
  });
}

cudaError_t add(const void* x, const void* y, void* out, ElemType t, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  if (t == ElemType::bf16 && n % 8 == 0 && aligned16({x, y, out})) {
    using B = __nv_bfloat16;
    add_vec<<<blocks_for(n / 8), kThreads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(y),
                                                   static_cast<B*>(out), n);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    add_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(y),
                                                     static_cast<T*>(out), n);
  });
}

cudaError_t silu(const void* x, void* out, ElemType t, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    silu_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(out), n);
  });
}

cudaError_t swiglu(const void* u, void* out, ElemType t, int64_t rows, int64_t f, bool bf, cudaStream_t s) {
  if (rows * f == 0) return cudaSuccess;
  if (t == ElemType::bf16 && f % 8 == 0 && aligned16({u, out})) {
    using B = __nv_bfloat16;
    auto kernel = rows * f < (int64_t(1) << 31) ? swiglu_vec<uint32_t> : swiglu_vec<int64_t>;
    kernel<<<blocks_for(rows * f / 8), kThreads, 0, s>>>(static_cast<const B*>(u), static_cast<B*>(out), rows, f, bf);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    swiglu_kernel<T>
        <<<blocks_for(rows * f), kThreads, 0, s>>>(static_cast<const T*>(u), static_cast<T*>(out), rows, f, bf);
  });
}

cudaError_t rope(const void* x, const void* cs, const void* sn, void* out, ElemType t, int64_t rows, int64_t cols,
                 int64_t rot, int64_t d, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<blocks_for(rows * cols), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(cs),
                                                                static_cast<const T*>(sn), static_cast<T*>(out), rows,
                                                                cols, rot, d, bf);
  });
}

cudaError_t norm_modulate(const void* x, const void* w, const void* shift, const void* scale, const int32_t* idx,
                          void* out, ElemType t, int64_t rows, int64_t cols, float eps, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (t == ElemType::bf16 && cols % 8 == 0 && aligned16({x, w, shift, scale, out})) {
    using B = __nv_bfloat16;
    constexpr int kRowsPerBlock = 8;
    norm_modulate_vec<<<static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock), 32 * kRowsPerBlock, 0, s>>>(
        static_cast<const B*>(x), static_cast<const B*>(w), static_cast<const B*>(shift), static_cast<const B*>(scale),
        idx, static_cast<B*>(out), rows, cols, eps, bf);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    norm_modulate_kernel<T><<<static_cast<unsigned>(rows), kThreads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(shift), static_cast<const T*>(scale),
        idx, static_cast<T*>(out), cols, eps, bf);
  });
}

cudaError_t qk_norm_rope(const void* x, const void* w, const void* cs, const void* sn, void* out, ElemType t,
                         int64_t rows, int64_t cols, int64_t d, int64_t rot, float eps, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (d > 1024 || cols % d) return cudaErrorInvalidValue;
  const int64_t items = rows * (cols / d);
  constexpr int kWarps = 4;
  if (t == ElemType::bf16 && d == 128 && aligned16({x, w, out})) {
    using B = __nv_bfloat16;
    constexpr int kHeadsPerBlock = 8;
    qk_norm_rope_d128<<<static_cast<unsigned>((items + kHeadsPerBlock - 1) / kHeadsPerBlock), 16 * kHeadsPerBlock, 0,
                        s>>>(static_cast<const B*>(x), static_cast<const B*>(w), static_cast<const B*>(cs),
                             static_cast<const B*>(sn), static_cast<B*>(out), rows, cols / d, rot, eps, bf);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    qk_norm_rope_kernel<T>
        <<<static_cast<unsigned>((items + kWarps - 1) / kWarps), 32 * kWarps, kWarps * d * sizeof(float), s>>>(
            static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(cs), static_cast<const T*>(sn),
            static_cast<T*>(out), rows, cols / d, d, rot, eps, bf);
  });
}

cudaError_t gather_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  return move_rows<false>(x, idx, out, n, row_bytes, s);
}

cudaError_t scatter_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  return move_rows<true>(x, idx, out, n, row_bytes, s);
}

cudaError_t attention_simple(const void* q, const void* k, const void* v, void* o, ElemType t, int64_t nq, int64_t nk,
                             int64_t heads, int64_t d, cudaStream_t s) {
  if (nq == 0 || heads == 0) return cudaSuccess;
  if (d > 256 || nk == 0) return cudaErrorInvalidValue;
  const float scale = 1.0f / sqrtf(static_cast<float>(d));
  const int64_t threads = nq * heads * 32;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    attention_simple_kernel<T, 8><<<blocks_for(threads, 128), 128, 0, s>>>(
        static_cast<const T*>(q), static_cast<const T*>(k), static_cast<const T*>(v), static_cast<T*>(o), nq, nk, heads,
        d, scale);
  });
}

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

cudaError_t attention_fp8_scales(const float* descale_v, float p_scale, float* scale_s, float* descale_s,
                                 float* scale_o, float* descale_o, cudaStream_t s) {
  attention_fp8_scales_kernel<<<1, 1, 0, s>>>(descale_v, p_scale, scale_s, descale_s, scale_o, descale_o);
  return cudaGetLastError();
}

}  // namespace h3::cuda

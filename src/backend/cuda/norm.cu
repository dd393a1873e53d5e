// The norm family (backend/cuda/norm.h): RMSNorm in its roundings (once; transformers' Qwen3 twice; f32 rows stored
// as bf16, alone or after the ViT decoder's residual update), RMSNorm + modulation, the fused residual + RMSNorm +
// modulation row kernel with its FP8 output, and LayerNorm. Built with --fmad=false, so that a*b+c rounds twice, as on
// the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/norm.h"
#include "backend/cuda/row.cuh"
#include "ops/fp8_bound.h"

namespace h3::cuda {

namespace {

// RMSNorm in its roundings (ops::NormRound): one block per (row, group), threads stride over the group. TO is the
// stored type (T, or bf16 for f32 rows: rounded once at the store); kTwice is transformers' Qwen3 rounding, the
// normalised value rounded to T before the weight (which it needs).
template <typename T, typename TO, bool kTwice>
__global__ void rms_norm_kernel(const T* x, const T* w, TO* y, int64_t cols, int64_t group, float eps) {
  const int64_t base = row_group_base(cols, group);
  __shared__ float partial[32];
  const float inv = block_rms_inverse(x, base, group, eps, partial);
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    if constexpr (kTwice) {
      T normed;
      st(&normed, 0, ld(x, base + c) * inv);  // rounded to T: transformers' hidden_states.to(input_dtype)
      st(y, base + c, ld(&normed, 0) * ld(w, c));
    } else {
      const float v = ld(x, base + c) * inv;
      st(y, base + c, w ? v * ld(w, c) : v);
    }
  }
}

// One block per row: sum of squares, then norm * w rounded to T, then the modulation.
template <typename T>
__global__ void norm_modulate_kernel(const T* x, const T* w, const T* shift, const T* scale, const int32_t* idx, T* out,
                                     int64_t cols, float eps, bool bf) {
  __shared__ float partial[32];
  const int64_t row = blockIdx.x, base = row * cols, t = int64_t(idx[row]) * cols;
  const float inv = block_rms_inverse(x, base, cols, eps, partial);
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

// One block per row r:
//   x' = x                                   (no gate), or
//   x' = bf ? rb(x + rb(g[idx] * y)) : x + g[idx] * y, stored to x_out   (the gated residual)
//   n  = rb((x' * inv_rms(x')) * w)
//   h  = bf ? rb(rb(n * rb(1 + scale[idx])) + shift[idx]) : n * (1 + scale[idx]) + shift[idx]
// with every value rounded to bf16 where it is stored. Rows of cols values, cols % 8 == 0. The bf16 steps run as
// bf16 pair arithmetic (bf16x8_*: the same bits).
template <int VPT>
__global__ void __launch_bounds__(256)
    residual_norm_modulate_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ gate,
                                  const __nv_bfloat16* __restrict__ y, const int32_t* __restrict__ idx,
                                  __nv_bfloat16* __restrict__ x_out, const __nv_bfloat16* __restrict__ w,
                                  const __nv_bfloat16* __restrict__ shift, const __nv_bfloat16* __restrict__ scale,
                                  RowOut out, int64_t cols, float eps, bool bf) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, base = r * cols, chunks = cols / 8;
  const int64_t t = int64_t(idx[r]) * cols;
  bool live[VPT];
  uint4 raw[VPT];
  load_row<VPT>(x + base, chunks, raw, live);
  if (gate) {
    uint4 graw[VPT], yraw[VPT];
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
      if (live[k]) {
        yraw[k] = load_raw(y + base + c * 8);
        graw[k] = load_raw(gate + t + c * 8);
      }
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
      if (!live[k]) continue;
      if (bf) {
        raw[k] = bf16x8_add(raw[k], bf16x8_mul(graw[k], yraw[k]));
      } else {
        float v[8], g[8], yv[8];
        unpack(raw[k], v);
        unpack(graw[k], g);
        unpack(yraw[k], yv);
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = v[j] + g[j] * yv[j];
        raw[k] = pack(v);
      }
      *reinterpret_cast<uint4*>(x_out + base + (threadIdx.x + int64_t(k) * blockDim.x) * 8) = raw[k];
    }
  }
  // The stored (bf16) values of x': what the separate norm would read back.
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (!live[k]) continue;
    float v[8];
    unpack(raw[k], v);
#pragma unroll
    for (int j = 0; j < 8; ++j) ss += v[j] * v[j];
  }
  const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / static_cast<float>(cols) + eps);
  uint4 h[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (!live[k]) continue;
    const int64_t c = (threadIdx.x + int64_t(k) * blockDim.x) * 8;
    float v[8], wv[8];
    unpack(raw[k], v);
    unpack(load_raw(w + c), wv);
#pragma unroll
    for (int j = 0; j < 8; ++j) v[j] = (v[j] * inv) * wv[j];
    const uint4 n = pack(v);  // rb(n)
    const uint4 sc = load_raw(scale + t + c), sh = load_raw(shift + t + c);
    if (bf) {
      const uint4 one = make_uint4(kBf16One2, kBf16One2, kBf16One2, kBf16One2);
      h[k] = bf16x8_add(bf16x8_mul(n, bf16x8_add(one, sc)), sh);
    } else {
      float nv[8], scv[8], shv[8];
      unpack(n, nv);
      unpack(sc, scv);
      unpack(sh, shv);
#pragma unroll
      for (int j = 0; j < 8; ++j) nv[j] = nv[j] * (1.0f + scv[j]) + shv[j];
      h[k] = pack(nv);  // stored as bf16; the fp8 quantization starts from that value
    }
  }
  write_row<VPT>(out, r, cols, h, live, scratch);
}

// The per-tensor FP8 scale bound of residual_norm_modulate (ops.h): one block.
__global__ void norm_fp8_bound_kernel(const __nv_bfloat16* w, int64_t cols, const __nv_bfloat16* shift,
                                      const __nv_bfloat16* scale, int64_t table, float* out) {
  __shared__ float scratch[32];
  float mw = 0.f, m1 = 0.f, ms = 0.f;
  for (int64_t i = threadIdx.x; i < cols; i += blockDim.x) mw = fmaxf(mw, fabsf(__bfloat162float(w[i])));
  for (int64_t i = threadIdx.x; i < table; i += blockDim.x) {
    m1 = fmaxf(m1, fabsf(__bfloat162float(scale[i]) + 1.0f));
    ms = fmaxf(ms, fabsf(__bfloat162float(shift[i])));
  }
  mw = block_max(mw, scratch);
  m1 = block_max(m1, scratch);
  ms = block_max(ms, scratch);
  if (threadIdx.x == 0)
    *out = ops::round_up_pow2(fmaxf((sqrtf(static_cast<float>(cols)) * mw * m1 + ms) * 1.02f / kFp8Max, kTinyScale));
}

}  // namespace

cudaError_t rms_norm(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols, int64_t group,
                     float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int64_t blocks = rows * (cols / group);
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    rms_norm_kernel<T, T, false><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), cols, group, eps);
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

cudaError_t norm_fp8_bound(const void* w, int64_t cols, const void* shift, const void* scale, int64_t table_elems,
                           float* out, cudaStream_t s) {
  using B = __nv_bfloat16;
  norm_fp8_bound_kernel<<<1, 1024, 0, s>>>(static_cast<const B*>(w), cols, static_cast<const B*>(shift),
                                           static_cast<const B*>(scale), table_elems, out);
  return cudaGetLastError();
}

cudaError_t residual_norm_modulate(const void* x, const void* gate, const void* y, const int32_t* idx, void* x_out,
                                   const void* w, const void* shift, const void* scale, void* h, void* h_fp8,
                                   float* h_scale, const float* h_fixed_scale, int64_t rows, int64_t cols, float eps,
                                   bool bf16_steps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const RowShape rs = row_shape(cols / 8);
  if (cols % 8 || !rs.vpt || !(h || h_fp8) || (gate && !(y && x_out)) || (h_fp8 && !h_scale && !h_fixed_scale))
    return cudaErrorNotSupported;
  for (const void* p : std::initializer_list<const void*>{x, gate, y, x_out, w, shift, scale, h, h_fp8})
    if (!aligned16(p)) return cudaErrorNotSupported;
  using B = __nv_bfloat16;
  const RowOut o = row_out(h, h_fp8, h_scale, h_fixed_scale);
  return by_vpt(rs.vpt, [&]<int V>() {
    residual_norm_modulate_kernel<V><<<static_cast<unsigned>(rows), rs.threads, 0, s>>>(
        static_cast<const B*>(x), static_cast<const B*>(gate), static_cast<const B*>(y), idx, static_cast<B*>(x_out),
        static_cast<const B*>(w), static_cast<const B*>(shift), static_cast<const B*>(scale), o, cols, eps, bf16_steps);
  });
}

namespace {

// One block per row.
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * cols;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += ld(x, base + c);
  const float mean = block_sum(s, scratch) / static_cast<float>(cols);
  float q = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = ld(x, base + c) - mean;
    q += d * d;
  }
  const float inv = 1.0f / sqrtf(block_sum(q, scratch) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (ld(x, base + c) - mean) * inv;
    if (w) v = v * ld(w, c);
    if (b) v = v + ld(b, c);
    st(y, base + c, v);
  }
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
    rms_norm_kernel<T, T, true><<<static_cast<unsigned>(blocks), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<T*>(y), cols, group, eps);
  });
}

cudaError_t layer_norm(const void* x, const void* w, const void* b, void* y, ElemType t, int64_t rows, int64_t cols,
                       float eps, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = cols >= 1024 ? 1024 : static_cast<int>((cols + 31) / 32 * 32);
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), cols, eps);
  });
}

namespace {

// add_scaled_kernel's sum and rms_norm_kernel's f32 -> bf16 norm of it in one pass: the same expressions, the same
// per-thread column order and the same reduction, the sum kept in registers (kResidualNormMaxPer values a thread)
// instead of re-read, so both outputs are bitwise those of the two kernels.
template <typename TY>
__global__ void add_scaled_rms_norm_kernel(const float* x, const TY* y, const float* scale, float* sum, const float* w,
                                           __nv_bfloat16* out, int64_t cols, int64_t group, float eps) {
  const int64_t g = blockIdx.x % (cols / group), base = row_group_base(cols, group);
  float v[kResidualNormMaxPer];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kResidualNormMaxPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (c < group) {
      const int64_t idx = base + c;
      const float a = ld(x, idx) + ld(y, idx) * ld(scale, g * group + c);  // = scale[idx % cols]
      st(sum, idx, a);
      v[i] = a;
      ss += a * a;
    }
  }
  __shared__ float partial[32];
  const float inv = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(group) + eps);
#pragma unroll
  for (int i = 0; i < kResidualNormMaxPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (c < group) {
      const float t = v[i] * inv;
      out[base + c] = __float2bfloat16_rn(w ? t * w[c] : t);
    }
  }
}

// Whole-row f32 norms (group == cols, cols % 4 == 0, 16-byte aligned): a row per block, 4 floats (16 bytes) per
// access, every load issued before the row's sum of squares. With kAdd the row is first x + y * scale (the
// residual update, stored to `sum`). The separate norm and the fused residual + norm share this kernel, so their
// reductions (and results) are bitwise the same.
template <int VPT, typename TY, bool kAdd>
__global__ void __launch_bounds__(256)
    f32_row_norm_kernel(const float* __restrict__ x, const TY* __restrict__ y, const float* __restrict__ scale,
                        float* __restrict__ sum, const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                        int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, chunks = cols / 4, base = row * cols;
  float v[VPT][4];
  bool live[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    live[k] = c < chunks;
    if (!live[k]) continue;
    const float4 a = *reinterpret_cast<const float4*>(x + base + c * 4);
    v[k][0] = a.x, v[k][1] = a.y, v[k][2] = a.z, v[k][3] = a.w;
    if constexpr (kAdd) {
      float yv[4];
      if constexpr (sizeof(TY) == 4) {
        const float4 b = *reinterpret_cast<const float4*>(reinterpret_cast<const float*>(y) + base + c * 4);
        yv[0] = b.x, yv[1] = b.y, yv[2] = b.z, yv[3] = b.w;
      } else {
        const uint2 raw = *reinterpret_cast<const uint2*>(reinterpret_cast<const __nv_bfloat16*>(y) + base + c * 4);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
        const float2 p0 = __bfloat1622float2(h[0]), p1 = __bfloat1622float2(h[1]);
        yv[0] = p0.x, yv[1] = p0.y, yv[2] = p1.x, yv[3] = p1.y;
      }
      const float4 sc = *reinterpret_cast<const float4*>(scale + c * 4);
      const float scv[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) v[k][j] = v[k][j] + yv[j] * scv[j];
      *reinterpret_cast<float4*>(sum + base + c * 4) = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    if (live[k])
#pragma unroll
      for (int j = 0; j < 4; ++j) ss += v[k][j] * v[k][j];
  const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / static_cast<float>(cols) + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (!live[k]) continue;
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    float o[4];
    if (w) {
      const float4 wv = *reinterpret_cast<const float4*>(w + c * 4);
      const float ww[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = (v[k][j] * inv) * ww[j];
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = v[k][j] * inv;
    }
    uint2 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    h[0] = __floats2bfloat162_rn(o[0], o[1]);
    h[1] = __floats2bfloat162_rn(o[2], o[3]);
    *reinterpret_cast<uint2*>(out + base + c * 4) = raw;
  }
}

// Launches f32_row_norm_kernel when the row fits (at most 8 chunks of 4 a thread, 256 threads); false otherwise.
template <typename TY, bool kAdd>
bool f32_row_norm(const float* x, const TY* y, const float* scale, float* sum, const float* w, __nv_bfloat16* out,
                  int64_t rows, int64_t cols, int64_t group, float eps, cudaStream_t s) {
  if (group != cols || cols % 4) return false;
  for (const void* p : std::initializer_list<const void*>{x, y, scale, sum, w, out})
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  const int64_t chunks = cols / 4;
  const int vpt = static_cast<int>((chunks + 255) / 256);
  if (vpt < 1 || vpt > 8) return false;
  const int threads = static_cast<int>(((chunks + vpt - 1) / vpt + 31) / 32 * 32);
  const unsigned blocks = static_cast<unsigned>(rows);
  switch (vpt) {
#define H3_ROW_NORM_CASE(V)                                                                           \
  case V:                                                                                             \
    f32_row_norm_kernel<V, TY, kAdd><<<blocks, threads, 0, s>>>(x, y, scale, sum, w, out, cols, eps); \
    break;
    H3_ROW_NORM_CASE(1)
    H3_ROW_NORM_CASE(2)
    H3_ROW_NORM_CASE(3)
    H3_ROW_NORM_CASE(4)
    H3_ROW_NORM_CASE(5)
    H3_ROW_NORM_CASE(6)
    H3_ROW_NORM_CASE(7)
    H3_ROW_NORM_CASE(8)
#undef H3_ROW_NORM_CASE
  }
  return true;
}

}  // namespace

cudaError_t rms_norm_f32_to_bf16(const float* x, const float* w, void* y, int64_t rows, int64_t cols, int64_t group,
                                 float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (f32_row_norm<float, false>(x, nullptr, nullptr, nullptr, w, static_cast<__nv_bfloat16*>(y), rows, cols, group,
                                 eps, s))
    return cudaGetLastError();
  const int64_t blocks = rows * (cols / group);
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  rms_norm_kernel<float, __nv_bfloat16, false>
      <<<static_cast<unsigned>(blocks), threads, 0, s>>>(x, w, static_cast<__nv_bfloat16*>(y), cols, group, eps);
  return cudaGetLastError();
}

cudaError_t add_scaled_rms_norm_to_bf16(const float* x, const void* y, ElemType ty, const float* scale, float* sum,
                                        const float* w, void* out, int64_t rows, int64_t cols, int64_t group, float eps,
                                        cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  if (group <= 0 || cols % group != 0 || group > static_cast<int64_t>(threads) * kResidualNormMaxPer)
    return cudaErrorInvalidValue;
  const unsigned blocks = static_cast<unsigned>(rows * (cols / group));
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (ty == ElemType::f32 &&
      f32_row_norm<float, true>(x, static_cast<const float*>(y), scale, sum, w, o, rows, cols, group, eps, s))
    return cudaGetLastError();
  if (ty == ElemType::bf16 && f32_row_norm<__nv_bfloat16, true>(x, static_cast<const __nv_bfloat16*>(y), scale, sum, w,
                                                                o, rows, cols, group, eps, s))
    return cudaGetLastError();
  if (ty == ElemType::f32)
    add_scaled_rms_norm_kernel<float>
        <<<blocks, threads, 0, s>>>(x, static_cast<const float*>(y), scale, sum, w, o, cols, group, eps);
  else if (ty == ElemType::bf16)
    add_scaled_rms_norm_kernel<__nv_bfloat16>
        <<<blocks, threads, 0, s>>>(x, static_cast<const __nv_bfloat16*>(y), scale, sum, w, o, cols, group, eps);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace h3::cuda

// Row kernels for bf16 activations (declared in backend/cuda/kernels.h): the fused residual + RMSNorm + modulation, q/k
// head norm + RoPE for 128-channel heads, SwiGLU and the per-row FP8 quantization. Built with --fmad=false like
// every kernel of the backend, so the bf16 roundings fall exactly where the CPU backend's emulation puts them.
//
// Why these shapes: the DiT's rows are 5376 (hidden) or 14336 (ffn) bf16 values, and every one of these kernels is
// bound by device memory. A whole row lives in one thread block's registers (VPT 16-byte chunks per thread, every
// load issued before the row's reduction), so x is read from DRAM once, and the reduction order of a row depends
// only on the row's width, never on how many rows a rank holds (bitwise parity across world sizes).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/vae_kernels.h"
#include "ops/fp8_bound.h"

namespace h3::cuda {

namespace {

constexpr float kFp8Max = 448.0f;
constexpr float kTinyScale = 1e-12f;

// Eight fp8 e4m3 values v / scale (round to nearest even, saturating: |v| <= 448 scale by construction) as one
// 8-byte store. A power-of-two scale (the fixed bounds and the per-row scales are rounded up to one:
// ops::round_up_pow2) divides exactly as a product with its exact inverse, one multiply instead of a division's
// dozen instructions; any other scale takes the division. Both give the CPU backend's bits.
__device__ __forceinline__ void store_fp8x8(__nv_fp8_e4m3* p, const float (&v)[8], float scale) {
  float x[8];
  if ((__float_as_uint(scale) & 0x7fffffu) == 0) {
    const float inv = 1.0f / scale;
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = v[i] * inv;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) x[i] = v[i] / scale;
  }
  uint2 raw;
  __nv_fp8x2_storage_t* q = reinterpret_cast<__nv_fp8x2_storage_t*>(&raw);
#pragma unroll
  for (int i = 0; i < 4; ++i)
    q[i] = __nv_cvt_float2_to_fp8x2(make_float2(x[2 * i], x[2 * i + 1]), __NV_SATFINITE, __NV_E4M3);
  *reinterpret_cast<uint2*>(p) = raw;
}

// Eight bf16 values a chunk (four pairs), combined pair by pair in bf16 arithmetic (one instruction a pair). For
// bf16 operands each result is the bf16 rounding of the exact result, and so is rb() of the f32 operation: a
// product of two bf16 values is exact in f32, and so is a sum unless the exponents lie more than 15 apart, where
// the smaller term is too small to move the bf16 result. These are the kernels' f32-then-round steps, bit for bit.
template <typename Op>
__device__ __forceinline__ uint4 bf16x8_pairs(const uint4& a, const uint4& b, Op op) {
  uint4 r;
  const __nv_bfloat162* x = reinterpret_cast<const __nv_bfloat162*>(&a);
  const __nv_bfloat162* y = reinterpret_cast<const __nv_bfloat162*>(&b);
  __nv_bfloat162* z = reinterpret_cast<__nv_bfloat162*>(&r);
#pragma unroll
  for (int i = 0; i < 4; ++i) z[i] = op(x[i], y[i]);
  return r;
}
__device__ __forceinline__ uint4 bf16x8_mul(const uint4& a, const uint4& b) {
  return bf16x8_pairs(a, b, [](__nv_bfloat162 x, __nv_bfloat162 y) { return __hmul2_rn(x, y); });
}
__device__ __forceinline__ uint4 bf16x8_add(const uint4& a, const uint4& b) {
  return bf16x8_pairs(a, b, [](__nv_bfloat162 x, __nv_bfloat162 y) { return __hadd2_rn(x, y); });
}
__device__ __forceinline__ uint4 bf16x8_neg(const uint4& a) {
  return make_uint4(a.x ^ 0x80008000u, a.y ^ 0x80008000u, a.z ^ 0x80008000u, a.w ^ 0x80008000u);
}
constexpr uint32_t kBf16One2 = 0x3f803f80u;  // (1, 1) as bf16

// Where a row kernel writes its result: bf16 rows (`bf`), or fp8 rows with one dequantization scale per row
// (value = q * scale[r], scale[r] = round_up_pow2(max(amax_r / 448, 1e-12))) or, when `fixed` is given, with the one
// per-tensor scale *fixed (then `scale` is not written); or both.
struct RowOut {
  __nv_bfloat16* bf = nullptr;
  __nv_fp8_e4m3* q = nullptr;
  float* scale = nullptr;
  const float* fixed = nullptr;
};

// Writes the VPT chunks of row `r` held by this thread (chunk k at column (threadIdx.x + k * blockDim.x) * 8), given
// as bf16 bits: stored as they are, and/or quantized from their values.
// `max_abs`: the row's largest |value| when the caller has it already (< 0: taken here, from h).
template <int VPT>
__device__ __forceinline__ void write_row(const RowOut& o, int64_t r, int64_t cols, const uint4 (&h)[VPT],
                                          const bool (&live)[VPT], float* scratch, float max_abs = -1.f) {
  const int64_t base = r * cols;
  if (o.bf) {
#pragma unroll
    for (int k = 0; k < VPT; ++k)
      if (live[k]) *reinterpret_cast<uint4*>(o.bf + base + (threadIdx.x + k * blockDim.x) * 8) = h[k];
  }
  if (o.q) {
    float scale;
    if (o.fixed) {
      scale = *o.fixed;
    } else {
      float m = max_abs;
      if (m < 0.f) {
        m = 0.f;
#pragma unroll
        for (int k = 0; k < VPT; ++k)
          if (live[k]) {
            float v[8];
            unpack(h[k], v);
#pragma unroll
            for (int j = 0; j < 8; ++j) m = fmaxf(m, fabsf(v[j]));
          }
      }
      scale = ops::round_up_pow2(fmaxf(block_max(m, scratch) / kFp8Max, kTinyScale));
      if (threadIdx.x == 0) o.scale[r] = scale;
    }
#pragma unroll
    for (int k = 0; k < VPT; ++k)
      if (live[k]) {
        float v[8];
        unpack(h[k], v);
        store_fp8x8(o.q + base + (threadIdx.x + k * blockDim.x) * 8, v, scale);
      }
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
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    live[k] = c < chunks;
    if (live[k]) raw[k] = load_raw(x + base + c * 8);
  }
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

// Per-row FP8 quantization of bf16 rows (one block per row).
template <int VPT>
__global__ void __launch_bounds__(256)
    quantize_rows_kernel(const __nv_bfloat16* __restrict__ x, RowOut out, int64_t cols) {
  __shared__ float scratch[32];
  const int64_t r = blockIdx.x, base = r * cols, chunks = cols / 8;
  bool live[VPT];
  uint4 h[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    live[k] = c < chunks;
    if (live[k]) h[k] = load_raw(x + base + c * 8);
  }
  write_row<VPT>(out, r, cols, h, live, scratch);
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
// DiT's) in bf16 pairs, the row's max taken on the way: ~40 % fewer instructions than the f32-then-round steps, the
// same bits; 0.75 -> 0.62 ms for the 768p FP8 forward's rows on an H200 (4.4 TB/s; docs/notes.md, session 13).
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

// q/k norm + RoPE for bf16 heads of kD = 64 or 128 channels: kD/8 lanes per (row, head) item, 8 channels per lane,
// kQkItems items per lane group; the sum of squares per lane, then across the group's lanes (butterfly). The
// rotate-half partner of channel c (c < rot) is c +- rot/2, i.e. lane +- rot/16 of the same group: exchanged by
// shuffles (rot % 16 == 0). The DiT's heads are 128 wide, the video VAE decoder's 64. With bf16 steps the normalized
// values travel and rotate as bf16 pairs (bf16x8_*: the f32-then-round bits in a quarter of the instructions); when
// the heads of a row come in whole groups (heads % kQkItems == 0, the DiT's 56), a group loads its row's cos / sin
// once, before its items.
//
// A persistent grid (kQkBlocksPerSm blocks an SM): each lane group takes the groups of items g, g + stride, ... and
// loads the next one's items (and cos / sin) before it works on the current one, so that a group's loads are in
// flight while the previous group computes. On an H200 this took the DiT's 768p FP8 call from 0.281 to 0.244 ms
// (2.9 -> 3.4 TB/s; docs/notes.md, session 13); one-shot blocks (four an SM) left the memory idle between waves.
constexpr int kQkItems = 4;
constexpr int kQkBlocksPerSm = 3;  // 80 registers with the prefetched group: three blocks an SM (four spilled, slower)
// bf (bf16 steps), fp8 (e4m3 output, else bf16) and row_per_group (heads % kQkItems == 0) are template parameters:
// each build holds one path, with fewer registers (the general one spilled, and ran slower than the old kernel).
template <int kD, bool bf, bool fp8, bool row_per_group>
__global__ void __launch_bounds__(256, kQkBlocksPerSm)
    qk_norm_rope_vec_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                            const __nv_bfloat16* __restrict__ cs, const __nv_bfloat16* __restrict__ sn,
                            __nv_bfloat16* __restrict__ out, __nv_fp8_e4m3* __restrict__ out8,
                            const float* __restrict__ scale8, int64_t items, int heads, int rot, float eps) {
  constexpr int kLanes = kD / 8;
  const int lane = threadIdx.x & (kLanes - 1), c0 = lane * 8, half = rot / 2, shift_lanes = half / 8;
  const int64_t groups = (items + kQkItems - 1) / kQkItems;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x / kLanes;  // lane groups in the grid
  const int64_t sub = (threadIdx.x & 31) / kLanes;                  // this lane group within its warp
  float wv[8];
  unpack(load_raw(w + c0), wv);
  const bool rotates = c0 < rot;
  const bool lower = c0 < half;  // takes -partner * sin
  const int partner = (threadIdx.x & 31) + (lower ? shift_lanes : -shift_lanes);
  const float scale = fp8 ? *scale8 : 1.f;
  // The row of a group's first item: one division (32-bit where the items allow: a 64-bit one is a long subroutine).
  auto row_of = [&](int64_t first) {
    return items <= 0xffffffffll ? int64_t(uint32_t(first) / uint32_t(heads)) : first / heads;
  };
  // Issues group gg's loads (nothing past the end).
  auto load = [&](int64_t gg, uint4(&raw)[kQkItems], uint4& c, uint4& s) {
    const int64_t first = gg * kQkItems;
#pragma unroll
    for (int k = 0; k < kQkItems; ++k)
      if (gg < groups && first + k < items) raw[k] = load_raw(x + (first + k) * kD + c0);
    if (row_per_group && rotates && gg < groups) {  // (row_per_group: a constant)
      const int64_t row = row_of(first);
      c = load_raw(cs + row * rot + c0);
      s = load_raw(sn + row * rot + c0);
    }
  };
  int64_t g = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kLanes;
  uint4 raw[kQkItems], cs_raw{}, sn_raw{};
  load(g, raw, cs_raw, sn_raw);
  // Whole warps run the loop together (the shuffles): a lane group past the end works on zeros and stores nothing.
  for (int64_t gw = g - sub; gw < groups; gw += stride, g += stride) {
    uint4 next[kQkItems], next_cs{}, next_sn{};
    load(g + stride, next, next_cs, next_sn);
    const int64_t first = g * kQkItems;
    // The row of each item, counted on from the group's first (needed only for cos / sin loaded per item).
    int64_t row = row_per_group ? 0 : row_of(first);
    int rem = row_per_group ? 0 : static_cast<int>(first - row * heads);
#pragma unroll
    for (int k = 0; k < kQkItems; ++k) {
      const int64_t item = first + k;
      const bool active = g < groups && item < items;  // uniform over the lane group
      if (!row_per_group && k > 0 && ++rem == heads) {
        rem = 0;
        ++row;
      }
      float v[8];
      if (active)
        unpack(raw[k], v);
      else
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = 0.f;
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) ss = fmaf(v[j], v[j], ss);
      for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);  // within the group
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(kD) + eps);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = (v[j] * inv) * wv[j];
      const uint4 n = pack(v);  // rb(n)
      if constexpr (bf) {
        uint4 other;
        other.x = __shfl_sync(0xffffffffu, n.x, rotates ? partner : (threadIdx.x & 31));
        other.y = __shfl_sync(0xffffffffu, n.y, rotates ? partner : (threadIdx.x & 31));
        other.z = __shfl_sync(0xffffffffu, n.z, rotates ? partner : (threadIdx.x & 31));
        other.w = __shfl_sync(0xffffffffu, n.w, rotates ? partner : (threadIdx.x & 31));
        if (!active) continue;
        uint4 o = n;
        if (rotates) {
          if constexpr (!row_per_group) {
            cs_raw = load_raw(cs + row * rot + c0);
            sn_raw = load_raw(sn + row * rot + c0);
          }
          // rb(rb(n cos) + rb(+-partner sin))
          o = bf16x8_add(bf16x8_mul(n, cs_raw), bf16x8_mul(lower ? bf16x8_neg(other) : other, sn_raw));
        }
        if constexpr (fp8) {
          unpack(o, v);  // the bf16 value the unquantized path would store
          store_fp8x8(out8 + item * kD + c0, v, scale);
        } else {
          *reinterpret_cast<uint4*>(out + item * kD + c0) = o;
        }
        continue;
      }
      unpack(n, v);
      float other[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) other[j] = __shfl_sync(0xffffffffu, v[j], rotates ? partner : (threadIdx.x & 31));
      if (!active) continue;
      if (rotates) {
        float cv[8], sv[8];
        unpack(row_per_group ? cs_raw : load_raw(cs + row * rot + c0), cv);
        unpack(row_per_group ? sn_raw : load_raw(sn + row * rot + c0), sv);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float o = lower ? -other[j] : other[j];
          v[j] = v[j] * cv[j] + o * sv[j];
        }
      }
      if constexpr (fp8) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = rb(v[j]);  // the bf16 value the unquantized path would store
        store_fp8x8(out8 + item * kD + c0, v, scale);
      } else {
        *reinterpret_cast<uint4*>(out + item * kD + c0) = pack(v);
      }
    }
#pragma unroll
    for (int k = 0; k < kQkItems; ++k) raw[k] = next[k];
    cs_raw = next_cs;
    sn_raw = next_sn;
  }
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

bool aligned16(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Threads and chunks per thread for a row of `chunks` 16-byte chunks: about 256 threads, at most 8 chunks each.
struct RowShape {
  int threads = 0, vpt = 0;
};
RowShape row_shape(int64_t chunks) {
  RowShape s;
  s.vpt = static_cast<int>((chunks + 255) / 256);
  if (s.vpt < 1) s.vpt = 1;
  if (s.vpt > 8) return {};
  const int64_t t = (chunks + s.vpt - 1) / s.vpt;
  s.threads = static_cast<int>((t + 31) / 32 * 32);
  return s;
}

template <typename Launch>
cudaError_t by_vpt(int vpt, Launch launch) {
  switch (vpt) {
    case 1:
      launch.template operator()<1>();
      break;
    case 2:
      launch.template operator()<2>();
      break;
    case 3:
      launch.template operator()<3>();
      break;
    case 4:
      launch.template operator()<4>();
      break;
    case 5:
      launch.template operator()<5>();
      break;
    case 6:
      launch.template operator()<6>();
      break;
    case 7:
      launch.template operator()<7>();
      break;
    case 8:
      launch.template operator()<8>();
      break;
    default:
      return cudaErrorNotSupported;
  }
  return cudaGetLastError();
}

RowOut row_out(void* bf, void* q, float* scale, const float* fixed = nullptr) {
  return RowOut{static_cast<__nv_bfloat16*>(bf), static_cast<__nv_fp8_e4m3*>(q), scale, fixed};
}

}  // namespace

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
// The current device's SM count for the persistent grids (asked on every launch: cheap, and right for any device),
// or 0 when the runtime cannot say (the caller then launches every block it needs: any grid gives the same result).
int multiprocessors() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the launch's own check to report
    return 0;
  }
  return n;
}

template <int kD>
cudaError_t qk_norm_rope_vec(const void* x, const void* w, const void* cs, const void* sn, void* out, void* out_fp8,
                             const float* fp8_scale, int64_t rows, int64_t heads, int64_t rot, float eps,
                             bool bf16_steps, cudaStream_t s) {
  if (rows * heads == 0) return cudaSuccess;
  if (rot % 16 || rot > kD || rot <= 0 || (out_fp8 && !fp8_scale) || (!out && !out_fp8)) return cudaErrorNotSupported;
  for (const void* p : std::initializer_list<const void*>{x, w, cs, sn, out, out_fp8})
    if (!aligned16(p)) return cudaErrorNotSupported;
  const int64_t items = rows * heads;
  constexpr int threads = 256;
  const int64_t groups = (items + kQkItems - 1) / kQkItems;  // kD / 8 lanes each
  const int64_t needed = (groups * (kD / 8) + threads - 1) / threads;
  const int sms = multiprocessors();
  const unsigned blocks =
      static_cast<unsigned>(sms > 0 ? std::min<int64_t>(needed, int64_t(sms) * kQkBlocksPerSm) : needed);
  using B = __nv_bfloat16;
  using Kernel =
      void (*)(const B*, const B*, const B*, const B*, B*, __nv_fp8_e4m3*, const float*, int64_t, int, int, float);
  // [bf16 steps][fp8 out][whole groups of heads a row]
  static constexpr Kernel kernels[2][2][2] = {
      {{qk_norm_rope_vec_kernel<kD, false, false, false>, qk_norm_rope_vec_kernel<kD, false, false, true>},
       {qk_norm_rope_vec_kernel<kD, false, true, false>, qk_norm_rope_vec_kernel<kD, false, true, true>}},
      {{qk_norm_rope_vec_kernel<kD, true, false, false>, qk_norm_rope_vec_kernel<kD, true, false, true>},
       {qk_norm_rope_vec_kernel<kD, true, true, false>, qk_norm_rope_vec_kernel<kD, true, true, true>}}};
  const Kernel kernel = kernels[bf16_steps][out_fp8 != nullptr][heads % kQkItems == 0];
  kernel<<<blocks, threads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(w), static_cast<const B*>(cs),
                                    static_cast<const B*>(sn), static_cast<B*>(out),
                                    static_cast<__nv_fp8_e4m3*>(out_fp8), fp8_scale, items, static_cast<int>(heads),
                                    static_cast<int>(rot), eps);
  return cudaGetLastError();
}
}  // namespace

cudaError_t qk_norm_rope_d128(const void* x, const void* w, const void* cs, const void* sn, void* out, void* out_fp8,
                              const float* fp8_scale, int64_t rows, int64_t heads, int64_t rot, float eps,
                              bool bf16_steps, cudaStream_t s) {
  return qk_norm_rope_vec<128>(x, w, cs, sn, out, out_fp8, fp8_scale, rows, heads, rot, eps, bf16_steps, s);
}

cudaError_t qk_norm_rope_d64(const void* x, const void* w, const void* cs, const void* sn, void* out, int64_t rows,
                             int64_t heads, int64_t rot, float eps, bool bf16_steps, cudaStream_t s) {
  return qk_norm_rope_vec<64>(x, w, cs, sn, out, nullptr, nullptr, rows, heads, rot, eps, bf16_steps, s);
}

}  // namespace h3::cuda

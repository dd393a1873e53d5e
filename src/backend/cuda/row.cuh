// What the row kernels for bf16 activations share (the fused residual + RMSNorm + modulation in norm.cu, q/k head
// norm + RoPE in rope.cu, SwiGLU in activations.cu, the per-row FP8 quantization in quantize.cu): FP8 stores, bf16
// pair arithmetic, a row's output (bf16 and/or FP8) and the launch shape of a row. Built with --fmad=false like every
// kernel of the backend, so the bf16 roundings fall exactly where the CPU backend's emulation puts them. Internal to
// src/backend/cuda.
//
// Why these shapes: the DiT's rows are 5376 (hidden) or 14336 (ffn) bf16 values, and every one of these kernels is
// bound by device memory. A whole row lives in one thread block's registers (VPT 16-byte chunks per thread, every
// load issued before the row's reduction), so x is read from DRAM once, and the reduction order of a row depends
// only on the row's width, never on how many rows a rank holds (bitwise parity across world sizes).
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "backend/cuda/device.cuh"
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

// Loads the VPT chunks of a row of `chunks` 16-byte chunks at p that this thread holds (chunk k at column
// (threadIdx.x + k * blockDim.x) * 8, as write_row takes them); live[k]: whether chunk k lies inside the row.
template <int VPT>
__device__ __forceinline__ void load_row(const __nv_bfloat16* p, int64_t chunks, uint4 (&h)[VPT], bool (&live)[VPT]) {
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t c = threadIdx.x + int64_t(k) * blockDim.x;
    live[k] = c < chunks;
    if (live[k]) h[k] = load_raw(p + c * 8);
  }
}

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

inline bool aligned16(const void* p) {
  return p == nullptr || reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// Threads and chunks per thread for a row of `chunks` 16-byte chunks: about 256 threads, at most 8 chunks each.
struct RowShape {
  int threads = 0, vpt = 0;
};

inline RowShape row_shape(int64_t chunks) {
  RowShape s;
  s.vpt = static_cast<int>((chunks + 255) / 256);
  if (s.vpt < 1) s.vpt = 1;
  if (s.vpt > 8) return {};
  const int64_t t = (chunks + s.vpt - 1) / s.vpt;
  s.threads = static_cast<int>((t + 31) / 32 * 32);
  return s;
}

// Calls launch.operator()<V>() with V = vpt, the chunks per thread of a row (1 to 8, row_shape's): one instantiation
// of the row kernel per count. Other counts are refused.
template <typename Launch>
cudaError_t by_vpt(int vpt, Launch launch) {
  auto launch_matching = [&]<int... V>(std::integer_sequence<int, V...>) {
    return ((vpt == V + 1 && (launch.template operator()<V + 1>(), true)) || ...);
  };
  return launch_matching(std::make_integer_sequence<int, 8>{}) ? cudaGetLastError() : cudaErrorNotSupported;
}

inline RowOut row_out(void* bf, void* q, float* scale, const float* fixed = nullptr) {
  return RowOut{static_cast<__nv_bfloat16*>(bf), static_cast<__nv_fp8_e4m3*>(q), scale, fixed};
}

}  // namespace

}  // namespace h3::cuda

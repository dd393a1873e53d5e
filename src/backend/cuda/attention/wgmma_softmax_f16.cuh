// The FP8 attention kernel's online softmax on scores held in f16 accumulators (backend/cuda/attention/wgmma_fp8.cu,
// its three-warpgroup configuration): an m64nN f16 accumulator of which this thread holds, in register i, row r (i
// even) or r + 8 (i odd), columns 8 (i / 2) + 2 c + {0 (low half), 1 (high half)}. Half the registers of f32 scores,
// which is what lets a third consumer warpgroup fit. CUDA sources only, after backend/cuda/attention/wgmma.cuh.
#pragma once
#include <cstdint>

#include "backend/cuda/attention/wgmma.cuh"

namespace h3::cuda::wgmma {

#ifdef H3_WGMMA_BODY
// log2 of the largest softmax weight the kernel forms: P = 2^(s - b) <= 2^8 = 256, exact in e4m3 (the row's largest
// weight then takes no rounding, as 448 does in the f32 kernel: with 2^8.75 = 430.5, which e4m3 rounds to 416, the
// check's rel-L2 rose from 1.8e-2 to 3.0e-2, and a one-key row came out 3.4 % low).
constexpr float kLog2TopP = 8.0f;

__device__ __forceinline__ uint32_t hmax2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("max.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
  uint32_t r;
  asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
  return r;
}
__device__ __forceinline__ uint32_t hex2(uint32_t a) {
  uint32_t r;
  asm("ex2.approx.f16x2 %0, %1;" : "=r"(r) : "r"(a));
  return r;
}
// x rounded to f16, in both halves.
__device__ __forceinline__ uint32_t h2_of(float x) {
  uint32_t r;
  asm("{\n.reg .f16 h;\ncvt.rn.f16.f32 h, %1;\nmov.b32 %0, {h, h};\n}\n" : "=r"(r) : "f"(x));
  return r;
}
__device__ __forceinline__ float lo_f(uint32_t a) {
  float r;
  asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %1;\ncvt.f32.f16 %0, l;\n}\n" : "=f"(r) : "r"(a));
  return r;
}
__device__ __forceinline__ float hi_f(uint32_t a) {
  float r;
  asm("{\n.reg .f16 l, h;\nmov.b32 {l, h}, %1;\ncvt.f32.f16 %0, h;\n}\n" : "=f"(r) : "r"(a));
  return r;
}
// The f16 value at or above x, as a float.
__device__ __forceinline__ float round_up_f16(float x) {
  float r;
  asm("{\n.reg .f16 h;\ncvt.rp.f16.f32 h, %1;\ncvt.f32.f16 %0, h;\n}\n" : "=f"(r) : "f"(x));
  return r;
}
// Two f16 pairs as four e4m3 bytes: a's low half in the lowest byte, then a's high, b's low, b's high.
__device__ __forceinline__ uint32_t pack_e4m3_f16(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f16x2 lo, %1;\ncvt.rn.satfinite.e4m3x2.f16x2 hi, %2;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "r"(a), "r"(b));
  return r;
}

// The online softmax's first half for a tile of 2 R keys with `valid` keys (the rest set to -inf): the rows'
// offsets b0, b1 moved on and the factors for what was summed under the old ones. The offset is the f16 value that
// the exponent subtracts, 2^(s sl2h - b) with sl2h the scale rounded to f16 (sl2f its value): rounded up from the
// row's largest scaled score less kLog2TopP, so that no weight exceeds 2^kLog2TopP; -inf before the first tile.
template <int R>
__device__ __forceinline__ void tile_max_f16(uint32_t (&s)[R], int c, int valid, float sl2f, float& b0, float& b1,
                                             float& corr0, float& corr1) {
  if (valid < 4 * R) {
#pragma unroll
    for (int i = 0; i < R; ++i) {
      const int col = (i / 2) * 8 + 2 * c;
      if (col >= valid)
        s[i] = 0xFC00FC00u;  // -inf, -inf
      else if (col + 1 >= valid)
        s[i] = (s[i] & 0xFFFFu) | 0xFC000000u;
    }
  }
  uint32_t x0 = s[0], x1 = s[1], y0 = s[2], y1 = s[3];
#pragma unroll
  for (int i = 4; i < R; i += 4) {
    x0 = hmax2(x0, s[i]);
    x1 = hmax2(x1, s[i + 1]);
    y0 = hmax2(y0, s[i + 2]);
    y1 = hmax2(y1, s[i + 3]);
  }
  x0 = hmax2(x0, y0);
  x1 = hmax2(x1, y1);
  float m0 = fmaxf(lo_f(x0), hi_f(x0)), m1 = fmaxf(lo_f(x1), hi_f(x1));
  quad_max(m0, m1);
  const float n0 = fmaxf(b0, round_up_f16(m0 * sl2f - kLog2TopP));
  const float n1 = fmaxf(b1, round_up_f16(m1 * sl2f - kLog2TopP));
  corr0 = ex2(b0 - n0);
  corr1 = ex2(b1 - n1);
  b0 = n0;
  b1 = n1;
}

// The second half: scores -> 2^(s sl2h - b) in place (f16 pairs), and the rows' running sums l0, l1 (this thread's
// share, f32) carried over with the factors. Each row's tile sum is taken in f16, four chains then their sum (a
// half's sum <= R / 2 x 256 = 4,096 at 128 keys, each step rounded to 2^-11), before it joins the f32 sum.
template <int R>
__device__ __forceinline__ void tile_exp_f16(uint32_t (&s)[R], uint32_t sl2h2, float b0, float b1, float corr0,
                                             float corr1, float& l0, float& l1) {
  const uint32_t nb0 = h2_of(-b0), nb1 = h2_of(-b1);  // b is an f16 value: exact
#pragma unroll
  for (int i = 0; i < R; i += 2) {
    s[i] = hex2(hfma2(s[i], sl2h2, nb0));
    s[i + 1] = hex2(hfma2(s[i + 1], sl2h2, nb1));
  }
  uint32_t a0 = s[0], a1 = s[2], a2 = s[4], a3 = s[6];
  uint32_t e0 = s[1], e1 = s[3], e2 = s[5], e3 = s[7];
#pragma unroll
  for (int i = 8; i < R; i += 8) {
    a0 = hadd2(a0, s[i]);
    a1 = hadd2(a1, s[i + 2]);
    a2 = hadd2(a2, s[i + 4]);
    a3 = hadd2(a3, s[i + 6]);
    e0 = hadd2(e0, s[i + 1]);
    e1 = hadd2(e1, s[i + 3]);
    e2 = hadd2(e2, s[i + 5]);
    e3 = hadd2(e3, s[i + 7]);
  }
  const uint32_t r0 = hadd2(hadd2(a0, a1), hadd2(a2, a3)), r1 = hadd2(hadd2(e0, e1), hadd2(e2, e3));
  l0 = fmaf(l0, corr0, lo_f(r0) + hi_f(r0));
  l1 = fmaf(l1, corr1, lo_f(r1) + hi_f(r1));
}
#endif  // H3_WGMMA_BODY

}  // namespace h3::cuda::wgmma

// Our FP8 Hopper attention kernel: the bf16 kernel's plan (backend/cuda/attention/wgmma_bf16.cu: TMA ring, two consumer
// warpgroups, tile j's S issued with tile j-1's P V) with e4m3 operands and f32 accumulation:
//   S = (q8 k8^T) dq dk                 wgmma m64n128k32 e4m3, both from shared memory
//   P8 = e4m3(exp2(S' - m + log2 448))  the softmax weights (<= 1) times 448: e4m3's range, in registers
//   O += P8 vt8                         wgmma with P8 as the register A operand, V^T from shared memory
//   o = O dv / l                        bf16 (l: the row sums of 448 P); or o8 = e4m3(O / l) with descale dv
//                                       (|o| <= max|v|: no amax pass)
// Two configurations (Config below): two consumer warpgroups over 224-key tiles with S in f32, for any e4m3 inputs;
// and three over 128-key tiles with S in f16 accumulators, for calls whose |q8 . k8| is bounded below f16's range
// (attention_wgmma_fp8's f16_scores): half the registers for S let a third warpgroup fit, more warps a scheduler for
// a kernel whose time goes to latency.
// FP8 wgmma reads both shared operands K-major, so V comes transposed: vt8 [heads * 128, nkp] (row = head dim,
// column = key, nkp = nk rounded up to 32, the pad zero), written by transpose_v from v8 [nk, ld]. The keys of every
// 32-key group are permuted there (key_of_slot) so that the S accumulator a thread holds is, as it stands, its
// share of the P8 operand: no shuffles between the two MMAs.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <type_traits>

#include "backend/cuda/attention/wgmma.cuh"
#include "backend/cuda/attention/wgmma.h"
#include "backend/cuda/attention/wgmma_mma.cuh"
#include "backend/cuda/attention/wgmma_softmax_f16.cuh"

namespace h3::cuda {
namespace {

using namespace wgmma;

constexpr int kD = 128;  // head dim
// Keys per tile (kBN): 224 with f32 scores, faster than 128 there (fewer per-tile steps for the same MMAs;
// docs/notes.md, "2026-12-06 (rooms)"; 256 does not fit the registers); 128 with f16 scores and three warpgroups (160
// registers a thread: 160 keys spill). K's stage is
// [kBN keys x 128] with the 128-byte swizzle. V^T's is a [128 x 128 keys] block with the 128-byte swizzle, then for 224
// a [128 x 64 keys] block with the 64-byte one and a [128 x 32 keys] block with the 32-byte one: wgmma reads a K-major
// operand in rows of its swizzle's span.
constexpr int kStages = 2;        // K / V ring depth (3 measured no faster with 224-key tiles)
constexpr int kTile = 128 * 128;  // bytes of a [128 x 128] e4m3 tile: rows of one 128-byte swizzle span
// A kernel configuration: keys a tile, consumer warpgroups (64 query rows each), scores in f16.
template <int kBN_, int kWgs_, bool kF16_>
struct Config {
  static constexpr int kBN = kBN_, kWgs = kWgs_;
  static constexpr bool kF16 = kF16_;
  static constexpr int kBM = 64 * kWgs;              // query rows a CTA
  static constexpr int kConsumers = 128 * kWgs;      // consumer threads
  static constexpr int kThreads = kConsumers + 128;  // and the producer warpgroup
  // Registers a consumer thread may take (setmaxnreg; the producer keeps 24): all of them but the producer's.
  static constexpr int kRegs = kWgs == 2 ? 240 : 160;
  static_assert(kConsumers * kRegs + 128 * 24 <= 65536, "the register file");
};
using Wide = Config<224, 2, false>;  // any e4m3 inputs
using Three = Config<128, 3, true>;  // f16 scores
// The softmax weights (<= 1) times 448, e4m3's largest finite value, as 2^(x - m + log2 448).
[[maybe_unused]] constexpr float kLog2ScaleP = 8.807354922057604f;

template <int kBN, int kBM>
struct alignas(1024) Smem {
  uint8_t q[2][kBM * 128];         // this work item's Q tile and the next one's
  uint8_t k[kStages][kBN * 128];   // [kBN keys x 128]
  uint8_t vt[kStages][kBN * 128];  // [128 x 128 keys], [128 x 64 keys], [128 x 32 keys] (see above)
  uint8_t out[kBM * kD * 2];       // the output tile on its way to global memory
  uint64_t q_full[2], q_empty[2];
  uint64_t k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages];
};

// The key (0..31, within its group of 32) that column `slot` of the P8 operand stands for. In the m64n128 f32
// accumulator a thread (lane % 4 = c) holds columns 8 j + 2 c + {0, 1}; in the k32 e4m3 A operand it holds columns
// 4 c + {0..3} and 16 + 4 c + {0..3}. Reading its accumulator in order as its operand makes slot 4 c + i carry key
// {2c, 2c+1, 8+2c, 9+2c}[i] and slot 16 + 4 c + i key 16 + the same.
__host__ __device__ constexpr int key_of_slot(int slot) {
  return (slot / 16) * 16 + ((slot % 4) / 2) * 8 + 2 * ((slot % 16) / 4) + (slot % 2);
}

#ifdef H3_WGMMA_BODY
// S for a tile of N keys: m64nNk32 with q8 and k8 from shared memory, both K-major.
template <int N>
__device__ __forceinline__ void mma_ss_n(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (N == 128)
    mma_e4m3_ss_n128(d, a, b, accumulate);
  else
    mma_e4m3_ss_n224(d, a, b, accumulate);
}

// Four floats as e4m3 bytes, the first in the lowest byte (saturating to +-448).
__device__ __forceinline__ uint32_t pack_e4m3(float x0, float x1, float x2, float x3) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\ncvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\ncvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(x0), "f"(x1), "f"(x2), "f"(x3));
  return r;
}
__device__ __forceinline__ uint16_t pack2_e4m3(float x0, float x1) {
  uint16_t r;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;\n" : "=h"(r) : "f"(x0), "f"(x1));
  return r;
}
#endif  // H3_WGMMA_BODY

template <class Cfg, bool kOutFp8>
__global__ void __launch_bounds__(Cfg::kThreads, 1)
    attention_fp8_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                         const __grid_constant__ CUtensorMap tvt, const __grid_constant__ CUtensorMap tvt64,
                         const __grid_constant__ CUtensorMap tvt32, const float* __restrict__ dq,
                         const float* __restrict__ dk, const float* __restrict__ dv, void* __restrict__ o,
                         float* __restrict__ o_descale, int nq, int nk, int heads, int ld, float scale_log2) {
#ifndef H3_WGMMA_BODY
  __trap();  // built for another architecture too (PTX for compute_80): this kernel exists only as sm_90a
#else
  extern __shared__ uint8_t raw[];
  constexpr int kBN = Cfg::kBN, kBM = Cfg::kBM, kConsumers = Cfg::kConsumers;
  constexpr bool kF16 = Cfg::kF16;
  static_assert(kBN == 128 || kBN == 224, "tiles of 128 or 224 keys");
  constexpr int kStageBytes = kBN * 128;                    // of K, and of V^T
  constexpr bool kWide = kBN == 224;                        // V^T has its 64- and 32-key blocks
  constexpr int kOff64 = kTile, kOff32 = kTile + 128 * 64;  // where they start in a stage (kWide)
  Smem<kBN, kBM>& sm = *reinterpret_cast<Smem<kBN, kBM>*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  // Work items (kBM query rows, head), query tiles fastest, taken every gridDim.x from blockIdx.x: one per CTA
  // when the grid has one CTA per item, or several in turn (a persistent grid of one CTA per SM, where the next
  // item's Q and first K / V tiles load while this one finishes). The K / V ring runs on across items: tile t of
  // the CTA (counted over all its items) uses stage t % kStages with parity (t / kStages) & 1; Q alternates
  // between two buffers.
  const int qtiles = (nq + kBM - 1) / kBM, items = qtiles * heads;
  const int tiles = (nk + kBN - 1) / kBN;

  if (threadIdx.x == 0) {
    for (int b = 0; b < 2; ++b) {
      mbar_init(&sm.q_full[b], 1);
      mbar_init(&sm.q_empty[b], kConsumers / 32);
    }
    init_ring(sm, kStages, kConsumers / 32);
  }
  __syncthreads();

  // The producer warpgroup: one thread works, the rest give their registers up.
  if (threadIdx.x >= kConsumers) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == kConsumers) {
      int t = 0;  // K / V tiles loaded, over all items
      for (int w = blockIdx.x, i = 0; w < items; w += gridDim.x, ++i) {
        const int q0 = (w % qtiles) * kBM, col0 = (w / qtiles) * kD, b = i % 2;
        mbar_wait(&sm.q_empty[b], ((i / 2) & 1) ^ 1);
        mbar_expect_tx(&sm.q_full[b], kBM * 128);
        tma_load(sm.q[b], &tq, &sm.q_full[b], col0, q0);
        for (int j = 0; j < tiles; ++j, ++t) {
          const int s = t % kStages;
          const uint32_t phase = (t / kStages) & 1;
          mbar_wait(&sm.k_empty[s], phase ^ 1);
          mbar_expect_tx(&sm.k_full[s], kStageBytes);
          tma_load(sm.k[s], &tk, &sm.k_full[s], col0, j * kBN);
          mbar_wait(&sm.v_empty[s], phase ^ 1);
          mbar_expect_tx(&sm.v_full[s], kStageBytes);
          tma_load(sm.vt[s], &tvt, &sm.v_full[s], j * kBN, col0);
          if constexpr (kWide) {
            tma_load(sm.vt[s] + kOff64, &tvt64, &sm.v_full[s], j * kBN + 128, col0);
            tma_load(sm.vt[s] + kOff32, &tvt32, &sm.v_full[s], j * kBN + 192, col0);
          }
        }
      }
    }
    return;
  }

  // A consumer warpgroup: rows [64 g, 64 g + 64) of the tile; this thread holds rows r and r + 8 of its
  // warp's 16 and, of every 8 columns of S or O, columns 2 c and 2 c + 1.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(Cfg::kRegs) : "memory");
  // With an e4m3 O, g is made warp-uniform as the compiler sees it (a shuffle from lane 0), so that Q's descriptors
  // live in uniform registers: no register-to-uniform moves before each S MMA, and 8 registers free for the softmax.
  // (With a bf16 O, whose epilogue needs more registers, ptxas would then spill 88 bytes, in the loop too: that
  // instantiation keeps Q's descriptors in ordinary registers, and its P V wait where ptxas puts it.)
  const int g =
      kOutFp8 ? __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0) : static_cast<int>(threadIdx.x / 128);
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int c = lane % 4;
  const bool signal = lane == 0;
  // Descriptors by their low words: Q's (this warpgroup's 64 rows of the current item), and K's and V^T's for stage
  // 0; a stage's or a k-step's are these plus its offset in 16-byte units, the high words constants. (Built whole
  // before each MMA, they cost ~6 uniform instructions an MMA: ~65 a tile of ~680.)
  uint32_t q_lo = 0;
  const uint32_t k_lo0 = desc_lo(smem_u32(sm.k[0])), v_lo0 = desc_lo(smem_u32(sm.vt[0]));
  constexpr uint32_t kHi128 = desc_hi(1024, 1), kHi64 = desc_hi(512, 2), kHi32 = desc_hi(256, 3);
  const float sl2 = scale_log2 * dq[0] * dk[0];
  // f16 scores: the scale rounded to f16 (in both halves), and its value.
  [[maybe_unused]] const uint32_t sl2h2 = kF16 ? h2_of(sl2) : 0u;
  [[maybe_unused]] const float sl2f = kF16 ? lo_f(sl2h2) : 0.f;

  // S: f32 accumulators, or f16 pairs (wgmma_softmax_f16.cuh).
  using SAcc = std::conditional_t<kF16, uint32_t[kBN / 4], float[kBN / 2]>;
  SAcc s_acc;
  float o_acc[64];
  uint32_t p[kBN / 8];
  // Running row maxima, in log2 units of the scaled scores (f32 scores); with f16 scores the offsets b that the
  // exponent subtracts (tile_max_f16).
  float m0, m1;
  // This thread's share of the running row sums, in f32. (Summed by the P V MMA through rows of ones under V^T
  // they came out several per cent low at 38k keys: FP8 MMAs accumulate with ~14 bits.)
  float l0, l1;

  auto issue_qk = [&](int s, SAcc& sx) {
    fence_regs(sx);
    wg_fence();
    const uint32_t k_lo = k_lo0 + s * (kStageBytes >> 4);
#pragma unroll
    for (int kk = 0; kk < kD / 32; ++kk) {
      if constexpr (kF16) {
        static_assert(kBN == 128, "f16 scores in 128-key tiles");
        mma_e4m3_ss_n128_h(sx, desc_of(q_lo + kk * 2, kHi128), desc_of(k_lo + kk * 2, kHi128), kk > 0);
      } else {
        mma_ss_n<kBN>(sx, desc_of(q_lo + kk * 2, kHi128), desc_of(k_lo + kk * 2, kHi128), kk > 0);
      }
    }
    wg_commit();
  };
  // O += P V^T of one tile: the first kSteps k-steps of 32 keys (kBN / 32; 4 for a row's last tile when its keys
  // all lie in the first 128, the weights of the others being zero).
  auto issue_pv_steps = [&](int s, auto steps) {
    constexpr int kSteps = decltype(steps)::value;
    const uint32_t v_lo = v_lo0 + s * (kStageBytes >> 4);
    fence_regs(p);
    fence_regs(o_acc);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kSteps; ++kk) {
      const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
      if (kk < 4)  // keys [0, 128): the 128-byte-swizzled block
        mma_e4m3_rs_n128(o_acc, a, desc_of(v_lo + kk * 2, kHi128));
      else if (kk < 6)  // keys [128, 192): the 64-byte-swizzled one
        mma_e4m3_rs_n128(o_acc, a, desc_of(v_lo + (kOff64 >> 4) + (kk - 4) * 2, kHi64));
      else  // the last 32 keys: the 32-byte-swizzled one
        mma_e4m3_rs_n128(o_acc, a, desc_of(v_lo + (kOff32 >> 4), kHi32));
    }
    wg_commit();
  };
  auto issue_pv = [&](int s) { issue_pv_steps(s, std::integral_constant<int, kBN / 32>{}); };
  // Online softmax of tile j in s_acc (scores -> unnormalized weights, times 448); returns the factors for O's
  // rows.
  auto softmax = [&](int j, SAcc& s_acc, float& corr0, float& corr1) {
    if constexpr (kF16) {
      tile_max_f16(s_acc, c, nk - j * kBN, sl2f, m0, m1, corr0, corr1);
      tile_exp_f16(s_acc, sl2h2, m0, m1, corr0, corr1, l0, l1);
    } else {
      tile_max(s_acc, c, nk - j * kBN, sl2, m0, m1, corr0, corr1);
      // The weights come out scaled by 448 (log2 448 taken off the maximum): e4m3's range, no multiply.
      tile_exp(s_acc, sl2, m0 - kLog2ScaleP, m1 - kLog2ScaleP, corr0, corr1, l0, l1);
    }
  };
  // k-step t of the P V MMA takes S columns [32 t, 32 t + 32), in key_of_slot's order (f32 index 16 t + e, which
  // is f16 pair 8 t + e / 2).
  auto to_p = [&](const SAcc& s_acc) {
#pragma unroll
    for (int t = 0; t < kBN / 32; ++t) {
      if constexpr (kF16) {
        const uint32_t* x = s_acc + 8 * t;
        p[4 * t] = pack_e4m3_f16(x[0], x[2]);
        p[4 * t + 1] = pack_e4m3_f16(x[1], x[3]);
        p[4 * t + 2] = pack_e4m3_f16(x[4], x[6]);
        p[4 * t + 3] = pack_e4m3_f16(x[5], x[7]);
      } else {
        const float* x = s_acc + 16 * t;
        p[4 * t] = pack_e4m3(x[0], x[1], x[4], x[5]);
        p[4 * t + 1] = pack_e4m3(x[2], x[3], x[6], x[7]);
        p[4 * t + 2] = pack_e4m3(x[8], x[9], x[12], x[13]);
        p[4 * t + 3] = pack_e4m3(x[10], x[11], x[14], x[15]);
      }
    }
  };

  auto k_ready = [&](int j) { mbar_wait(&sm.k_full[j % kStages], (j / kStages) & 1); };
  auto v_ready = [&](int j) { mbar_wait(&sm.v_full[j % kStages], (j / kStages) & 1); };
  auto k_done = [&](int j) {
    if (signal) mbar_arrive(&sm.k_empty[j % kStages]);
  };
  auto v_done = [&](int j) {
    if (signal) mbar_arrive(&sm.v_empty[j % kStages]);
  };

  const bool narrow_tail = kBN != 128 && nk - (tiles - 1) * kBN <= 128;  // a row's last tile has <= 128 keys
  int t = 0;  // K / V tiles consumed, over all items (the producer's count)
  for (int w = blockIdx.x, i = 0; w < items; w += gridDim.x, ++i, t += tiles) {
    const int q0 = (w % qtiles) * kBM, col0 = (w / qtiles) * kD, b = i % 2;
    q_lo = desc_lo(smem_u32(sm.q[b]) + g * 64 * 128);
#pragma unroll
    for (int e = 0; e < 64; ++e) o_acc[e] = 0.f;
    m0 = m1 = -INFINITY;
    l0 = l1 = 0.f;
    mbar_wait(&sm.q_full[b], (i / 2) & 1);
    k_ready(t);
    issue_qk(t % kStages, s_acc);
    wg_wait<0>();
    fence_regs(s_acc);
    k_done(t);
    {
      float c0, c1;
      softmax(0, s_acc, c0, c1);
    }
    to_p(s_acc);
    for (int j = 1; j < tiles; ++j) {
      k_ready(t + j);
      issue_qk((t + j) % kStages, s_acc);
      v_ready(t + j - 1);
      issue_pv((t + j - 1) % kStages);
      wg_wait<1>();
      fence_regs(s_acc);
      k_done(t + j);
      float c0, c1;
      softmax(j, s_acc, c0, c1);
      // Row 0's sums done before P V's wait (e4m3 O: the forward's single-rank path): ptxas then keeps ~5/6 of the
      // softmax beside P V, which is faster; with the whole of it (both sums) the kernel ran slower than without the
      // boundary, measured, not understood (docs/notes.md, "2026-12-06 (rooms)").
      if constexpr (kOutFp8) block_boundary_after(l0);
      wg_wait<0>();
      fence_regs(o_acc);
      fence_regs(p);
      v_done(t + j - 1);
      rescale_rows(o_acc, c0, c1);
      to_p(s_acc);
    }
    if (signal) mbar_arrive(&sm.q_empty[b]);  // every S of this item is done: the producer may load Q anew
    v_ready(t + tiles - 1);
    if (narrow_tail)
      issue_pv_steps((t + tiles - 1) % kStages, std::integral_constant<int, 4>{});
    else
      issue_pv((t + tiles - 1) % kStages);
    wg_wait<0>();
    fence_regs(o_acc);
    v_done(t + tiles - 1);  // the ring runs on into the next item
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);

    // O in v8's units (o8 with descale dv), or in values.
    const float unit = kOutFp8 ? 1.f : dv[0];
    const float f0 = unit / l0, f1 = unit / l1;
    if (kOutFp8 && w == 0 && threadIdx.x == 0) *o_descale = dv[0];
    // Staged through shared memory and written in 16-byte pieces (2- or 4-byte stores straight to global cost
    // 5-8 % of the kernel); the barrier first lets the warpgroup's stores of the previous item finish reading.
    constexpr int kEs = kOutFp8 ? 1 : 2;  // output bytes a value
    uint8_t* stage = sm.out + g * 64 * kD * kEs;
    const int sr0 = warp * 16 + lane / 4, sr1 = sr0 + 8;
    named_sync_wg(3 + g);
#pragma unroll
    for (int e = 0; e < 64; e += 4) {
      const int col = (e / 4) * 8 + 2 * c;
      if constexpr (kOutFp8) {
        *reinterpret_cast<uint16_t*>(stage + sr0 * kD + col) = pack2_e4m3(o_acc[e] * f0, o_acc[e + 1] * f0);
        *reinterpret_cast<uint16_t*>(stage + sr1 * kD + col) = pack2_e4m3(o_acc[e + 2] * f1, o_acc[e + 3] * f1);
      } else {
        *reinterpret_cast<__nv_bfloat162*>(stage + (sr0 * kD + col) * 2) =
            __floats2bfloat162_rn(o_acc[e] * f0, o_acc[e + 1] * f0);
        *reinterpret_cast<__nv_bfloat162*>(stage + (sr1 * kD + col) * 2) =
            __floats2bfloat162_rn(o_acc[e + 2] * f1, o_acc[e + 3] * f1);
      }
    }
    named_sync_wg(3 + g);
    uint8_t* out = static_cast<uint8_t*>(o);
    constexpr int kPieces = kD * kEs / 16;  // 16-byte pieces a row
    for (int piece = threadIdx.x % 128; piece < 64 * kPieces; piece += 128) {
      const int row = piece / kPieces, chunk = piece % kPieces, grow = q0 + g * 64 + row;
      if (grow < nq)
        *reinterpret_cast<uint4*>(out + (static_cast<int64_t>(grow) * ld + col0) * kEs + chunk * 16) =
            *reinterpret_cast<const uint4*>(stage + row * kD * kEs + chunk * 16);
    }
  }
#endif
}

// vt[c, k0 + slot] = v[k0 + key_of_slot(slot), c] for each group of 32 keys k0, zero past nk: v8 [nk, cols] ->
// vt8 [cols, nkp] (cols % 64 == 0). A warp takes one group of 32 keys and 64 columns; lane (c, h, chunk) = lane % 4,
// lane / 4 % 2, lane / 8 loads 16 columns of the four keys that fill slots 16 h + 4 c .. + 3 (key_of_slot: 16 h +
// {2c, 2c + 1, 8 + 2c, 9 + 2c}), transposes the 4 x 16 bytes in registers (byte permutes) and stores one 4-byte word
// for each of its 16 columns; the 8 lanes of a chunk fill a whole 32-byte sector of a vt row. 16-byte loads, no
// shared memory, every byte moved once.
__device__ __forceinline__ void transpose4x4(uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t (&o)[4]) {
  const uint32_t t0 = __byte_perm(a0, a1, 0x5140), t1 = __byte_perm(a0, a1, 0x7362);  // interleave rows 0, 1
  const uint32_t t2 = __byte_perm(a2, a3, 0x5140), t3 = __byte_perm(a2, a3, 0x7362);  // and rows 2, 3
  o[0] = __byte_perm(t0, t2, 0x5410);                                                 // byte 0 of each row
  o[1] = __byte_perm(t0, t2, 0x7632);
  o[2] = __byte_perm(t1, t3, 0x5410);
  o[3] = __byte_perm(t1, t3, 0x7632);
}

// The transpose's lane plan is key_of_slot: slot 16 h + 4 c + i holds key 16 h + {2c, 2c + 1, 8 + 2c, 9 + 2c}[i].
constexpr bool lane_plan_is_key_of_slot() {
  for (int h = 0; h < 2; ++h)
    for (int c = 0; c < 4; ++c)
      for (int i = 0; i < 4; ++i)
        if (key_of_slot(16 * h + 4 * c + i) != 16 * h + 2 * c + (i / 2) * 8 + i % 2) return false;
  return true;
}
static_assert(lane_plan_is_key_of_slot());

constexpr int kTransposeWarps = 8;  // key groups a block
// kFromBf16: v is bf16 and quantized on the way, q = e4m3(v / scale) with scale = max(*amax / 448, 1e-12) (the
// bits of quantize_fp8's kernels; the first thread writes scale to *scale_out). Else v is already e4m3.
template <bool kFromBf16>
__global__ void __launch_bounds__(kTransposeWarps * 32)
    transpose_v_kernel(const void* __restrict__ v_raw, const float* __restrict__ amax, float* __restrict__ scale_out,
                       uint8_t* __restrict__ vt, int nk, int cols, int nkp) {
  const int lane = threadIdx.x % 32, c = lane % 4, h = (lane / 4) % 2, chunk = lane / 8;
  const int group = blockIdx.y * kTransposeWarps + threadIdx.x / 32;
  float scale = 1.f;
  if constexpr (kFromBf16) {
    scale = fmaxf(*amax / 448.0f, 1e-12f);
    if (blockIdx.x == 0 && blockIdx.y == 0 && threadIdx.x == 0) *scale_out = scale;
  }
  if (group * 32 >= nkp) return;
  const int col0 = blockIdx.x * 64 + chunk * 16;
  const int base = group * 32 + 16 * h + 2 * c;
  const int keys[4] = {base, base + 1, base + 8, base + 9};
  uint4 row[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    row[i] = make_uint4(0, 0, 0, 0);
    if (keys[i] >= nk) continue;
    const int64_t at = static_cast<int64_t>(keys[i]) * cols + col0;
    if constexpr (kFromBf16) {  // 16 bf16 values (two 16-byte loads) -> 16 e4m3 bytes, column order kept
      const uint4* src = reinterpret_cast<const uint4*>(static_cast<const __nv_bfloat16*>(v_raw) + at);
      uint32_t q[4];
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const uint4 raw = src[half];
        const __nv_bfloat16* b = reinterpret_cast<const __nv_bfloat16*>(&raw);
        auto pair = [&](int j) {  // columns j, j + 1 of these 8, the first in the low byte
          return static_cast<uint32_t>(
              __nv_cvt_float2_to_fp8x2(make_float2(__bfloat162float(b[j]) / scale, __bfloat162float(b[j + 1]) / scale),
                                       __NV_SATFINITE, __NV_E4M3));
        };
        q[2 * half] = pair(0) | pair(2) << 16;
        q[2 * half + 1] = pair(4) | pair(6) << 16;
      }
      row[i] = make_uint4(q[0], q[1], q[2], q[3]);
    } else {
      row[i] = *reinterpret_cast<const uint4*>(static_cast<const uint8_t*>(v_raw) + at);
    }
  }
  const int64_t out0 = static_cast<int64_t>(col0) * nkp + group * 32 + 16 * h + 4 * c;
  auto word = [](const uint4& u, int w) { return w == 0 ? u.x : w == 1 ? u.y : w == 2 ? u.z : u.w; };
#pragma unroll
  for (int w = 0; w < 4; ++w) {  // columns col0 + 4 w .. + 3
    uint32_t o[4];
    transpose4x4(word(row[0], w), word(row[1], w), word(row[2], w), word(row[3], w), o);
#pragma unroll
    for (int j = 0; j < 4; ++j) *reinterpret_cast<uint32_t*>(vt + out0 + static_cast<int64_t>(4 * w + j) * nkp) = o[j];
  }
}

}  // namespace

namespace {
int multiprocessors() {
  static const int sms = [] {
    int dev = 0, n = 0;
    return cudaGetDevice(&dev) == cudaSuccess &&
                   cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess && n > 0
               ? n
               : 0;
  }();
  return sms;
}
}  // namespace

bool attention_wgmma_fp8_f16_pays(int64_t nq, int64_t heads) {
  const int64_t sms = multiprocessors();
  if (sms <= 0 || nq <= 0 || heads <= 0) return false;
  // Rows an SM works through: turns of one item each, an item bm query rows of one head.
  auto rows = [&](int64_t bm) { return ((nq + bm - 1) / bm * heads + sms - 1) / sms * bm; };
  // The f16 kernel's rate a row over the f32 one's at full occupancy (37,830 x 56 heads on an H100: 1,026-1,028
  // against 980-992 TFLOPS, bench/attention_wgmma_check).
  constexpr double kF16Rate = 1.045;
  return static_cast<double>(rows(Three::kBM)) < static_cast<double>(rows(Wide::kBM)) * kF16Rate;
}

int64_t attention_wgmma_fp8_vt_cols(int64_t nk) {
  return (nk + 31) / 32 * 32;
}

namespace {
void transpose_v(const void* v, const float* amax, float* scale_out, void* vt, int64_t nk, int64_t cols,
                 cudaStream_t stream) {
  if (cols % 64 || nk <= 0 || nk > (int64_t{1} << 30) || cols > (int64_t{1} << 30) || !aligned16(v) || !aligned16(vt))
    throw std::runtime_error(
        "wgmma FP8 attention: V^T transpose needs columns in whole 64s, 16-byte alignment "
        "and fewer than 2^30 keys and columns");
  const int64_t nkp = attention_wgmma_fp8_vt_cols(nk), groups = nkp / 32;
  const dim3 grid(static_cast<unsigned>(cols / 64),
                  static_cast<unsigned>((groups + kTransposeWarps - 1) / kTransposeWarps));
  auto kernel = amax ? transpose_v_kernel<true> : transpose_v_kernel<false>;
  kernel<<<grid, kTransposeWarps * 32, 0, stream>>>(v, amax, scale_out, static_cast<uint8_t*>(vt), static_cast<int>(nk),
                                                    static_cast<int>(cols), static_cast<int>(nkp));
}
}  // namespace

void attention_wgmma_fp8_transpose_v(const void* v8, void* vt, int64_t nk, int64_t cols, cudaStream_t stream) {
  transpose_v(v8, nullptr, nullptr, vt, nk, cols, stream);
}

void attention_wgmma_fp8_transpose_quantize_v(const void* v, const float* amax, float* scale_out, void* vt, int64_t nk,
                                              int64_t cols, cudaStream_t stream) {
  if (!amax || !scale_out) throw std::runtime_error("wgmma FP8 attention: V quantization without amax / scale");
  transpose_v(v, amax, scale_out, vt, nk, cols, stream);
}

std::string attention_wgmma_fp8_unsupported(const void* q8, const void* k8, const void* v8, const void* o, int64_t nq,
                                            int64_t nk, int64_t heads, int64_t d, int64_t ld) {
  if (d != kD) return "head_dim " + std::to_string(d) + " (the kernel is built for 128)";
  if (nq <= 0 || nk <= 0 || heads <= 0) return "an empty shape";
  if (ld != heads * d) return "row stride " + std::to_string(ld) + " (needs heads * 128)";
  constexpr int64_t bm = Wide::kBM;  // the smaller query tile: the most work items
  if (nq > (int64_t{1} << 31) - Three::kBM || nk > (int64_t{1} << 30) || heads > 65535 ||
      ld * nk > (int64_t{1} << 40) || (nq + bm - 1) / bm * heads >= (int64_t{1} << 31))
    return "a shape past the grid's range";
  if (!aligned16(q8) || !aligned16(k8) || !aligned16(v8) || !aligned16(o)) return "a pointer not 16-byte aligned";
  return device_unsupported();
}

void attention_wgmma_fp8(const void* q8, const void* k8, const void* v8, const float* dq, const float* dk,
                         const float* dv, void* vt_scratch, void* o, bool o_fp8, float* o_descale, int64_t nq,
                         int64_t nk, int64_t heads, int64_t d, int64_t ld, cudaStream_t stream, bool f16_scores) {
  const std::string why = attention_wgmma_fp8_unsupported(q8, k8, v8, o, nq, nk, heads, d, ld);
  if (!why.empty()) throw std::runtime_error("wgmma FP8 attention cannot run this call: " + why);
  attention_wgmma_fp8_transpose_v(v8, vt_scratch, nk, ld, stream);
  attention_wgmma_fp8_on_vt(q8, k8, vt_scratch, dq, dk, dv, o, o_fp8, o_descale, nq, nk, heads, d, ld, stream,
                            f16_scores);
}

void attention_wgmma_fp8_on_vt(const void* q8, const void* k8, const void* vt_scratch, const float* dq, const float* dk,
                               const float* dv, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk,
                               int64_t heads, int64_t d, int64_t ld, cudaStream_t stream, bool f16_scores) {
  const std::string why = attention_wgmma_fp8_unsupported(q8, k8, vt_scratch, o, nq, nk, heads, d, ld);
  if (!why.empty()) throw std::runtime_error("wgmma FP8 attention cannot run this call: " + why);
  if (o_fp8 && !o_descale) throw std::runtime_error("wgmma FP8 attention: fp8 output without a descale pointer");
  const int64_t nkp = attention_wgmma_fp8_vt_cols(nk);
  using Kernel = void (*)(CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, CUtensorMap, const float*, const float*,
                          const float*, void*, float*, int, int, int, int, float);
  struct Variant {
    bool f16, o_fp8;
    Kernel kernel;
    int bn, bm, threads, smem;
  };
  auto variant = [](auto cfg, auto o8) {
    using Cfg = decltype(cfg);
    return Variant{Cfg::kF16, decltype(o8)::value, attention_fp8_kernel<Cfg, decltype(o8)::value>,           Cfg::kBN,
                   Cfg::kBM,  Cfg::kThreads,       static_cast<int>(sizeof(Smem<Cfg::kBN, Cfg::kBM>)) + 1024};
  };
  static const Variant variants[] = {variant(Wide{}, std::false_type{}), variant(Wide{}, std::true_type{}),
                                     variant(Three{}, std::false_type{}), variant(Three{}, std::true_type{})};
  static std::once_flag once;
  static cudaError_t attr = cudaSuccess;
  std::call_once(once, [&] {
    for (const Variant& v : variants)
      if (attr == cudaSuccess)
        attr = cudaFuncSetAttribute(v.kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, v.smem);
  });
  if (attr != cudaSuccess)
    throw std::runtime_error(std::string("wgmma FP8 attention: cudaFuncSetAttribute: ") + cudaGetErrorString(attr));
  const Variant* chosen = nullptr;
  for (const Variant& v : variants)
    if (v.f16 == f16_scores && v.o_fp8 == o_fp8) chosen = &v;
  const int bn = chosen->bn, bm = chosen->bm;
  // e4m3 boxes of q8 [nq, ld] (bm rows x 128), k8 [nk, ld] (bn keys x 128), vt8 [ld, nkp] (128 head-dim rows x 128
  // keys; x 64 keys with the 64-byte swizzle and x 32 with the 32-byte one for the wider tiles' last keys).
  const CUtensorMap tq = tensor_map(q8, CU_TENSOR_MAP_DATA_TYPE_UINT8, nq, ld, ld, 128, static_cast<uint32_t>(bm)),
                    tk = tensor_map(k8, CU_TENSOR_MAP_DATA_TYPE_UINT8, nk, ld, ld, 128, static_cast<uint32_t>(bn)),
                    tvt = tensor_map(vt_scratch, CU_TENSOR_MAP_DATA_TYPE_UINT8, ld, nkp, nkp, 128, 128),
                    tvt64 = tensor_map(vt_scratch, CU_TENSOR_MAP_DATA_TYPE_UINT8, ld, nkp, nkp, 64, 128,
                                       CU_TENSOR_MAP_SWIZZLE_64B),
                    tvt32 = tensor_map(vt_scratch, CU_TENSOR_MAP_DATA_TYPE_UINT8, ld, nkp, nkp, 32, 128,
                                       CU_TENSOR_MAP_SWIZZLE_32B);
  const Kernel kernel = chosen->kernel;
  const int smem = chosen->smem;
  // One CTA per SM taking the work items in turn (the ring running on across items, the next item's Q and first
  // tiles loading while one finishes): faster than one CTA per item (docs/notes.md, "2026-12-06 (rooms)"), the same
  // bits.
  const int64_t items = (nq + bm - 1) / bm * heads;
  int64_t ctas = items;
  if (const int sms = multiprocessors(); sms > 0) ctas = std::min<int64_t>(items, sms);
  if ((items + ctas - 1) / ctas * ((nk + bn - 1) / bn) >= (int64_t{1} << 31))
    throw std::runtime_error("wgmma FP8 attention: " + std::to_string(items) + " work items of " + std::to_string(nk) +
                             " keys on " + std::to_string(ctas) + " CTAs count 2^31 key tiles or more a CTA");
  const float scale_log2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)) * 1.4426950408889634);
  kernel<<<static_cast<unsigned>(ctas), chosen->threads, smem, stream>>>(
      tq, tk, tvt, tvt64, tvt32, dq, dk, dv, o, o_descale, static_cast<int>(nq), static_cast<int>(nk),
      static_cast<int>(heads), static_cast<int>(ld), scale_log2);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("wgmma FP8 attention launch: ") + cudaGetErrorString(e));
}

}  // namespace h3::cuda

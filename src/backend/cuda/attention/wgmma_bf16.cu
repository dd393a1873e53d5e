#include "backend/cuda/attention/wgmma.h"

#include <cuda_bf16.h>

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include "backend/cuda/attention/wgmma.cuh"
#include "backend/cuda/attention/wgmma_mma.cuh"

// The kernel's plan (one CTA = one 128-row query tile of one head; 384 threads):
//   warps 8-11     producer: one lane issues the TMA loads, Q once, then K_j and V_j into stage j % 2, each
//                  after the consumers have released that stage (mbarriers full/empty per stage, K and V apart,
//                  so that K_j can arrive before V_{j-1} is used);
//   warps 0-3, 4-7 two consumer warpgroups, query rows [0, 64) and [64, 128) of the tile. Per key tile j:
//                  issue S_j = Q K_j^T (8 wgmma k-steps from shared memory), issue O += P_{j-1} V_{j-1} (P in
//                  registers, V read transposed), wait for S_j, run the online softmax on it while the P V
//                  MMAs run, wait for them, rescale O and turn S_j into P_j (bf16).
// Shared tiles use the 128-byte swizzle that both TMA and wgmma understand: a [rows x 128] bf16 tile is two
// [rows x 64] halves (head dims 0-63, 64-127), each row 128 bytes with its 16-byte chunks XOR-ed by row % 8.
// Rows past nq / nk arrive as zeros (TMA fills out-of-bounds boxes); keys past nk are masked to -inf.

namespace h3::cuda {
namespace {

using namespace wgmma;

constexpr int kD = 128;   // head dim
constexpr int kBM = 128;  // query rows per CTA (two consumer warpgroups of 64)
// Keys per tile (kBN, the kernel's template parameter): 192, faster than 128 (docs/notes.md, "2026-12-06 (rooms)"; 208
// of the 240 registers for S, O and P); the kernel still compiles for 128. K and V stages are [kBN x 128], two [kBN x
// 64] halves.
constexpr int kKeysPerTile = 192;
constexpr int kStages = 2;       // K / V ring depth
constexpr int kConsumers = 256;  // threads of the two consumer warpgroups
// and the producer warpgroup (registers are handed out per warpgroup)
constexpr int kThreads = kConsumers + 128;
constexpr int kHalf = 128 * 64 * 2;  // bytes of one [128 x 64] swizzled half of Q's tile
constexpr int kTile = 2 * kHalf;     // bytes of Q's [128 x 128] tile

template <int kBN>
struct alignas(1024) Smem {
  uint8_t q[kTile];
  uint8_t k[kStages][kBN * 256];
  uint8_t v[kStages][kBN * 256];  // (K's stage 0 holds the output tile on its way to global memory at the end)
  uint64_t q_full;
  uint64_t k_full[kStages], k_empty[kStages], v_full[kStages], v_empty[kStages];
};

#ifdef H3_WGMMA_BODY

// S for a tile of N keys: m64nNk16 with Q and K from shared memory, both K-major (row = m or n, 16 values of k).
template <int N>
__device__ __forceinline__ void mma_ss_n(float (&d)[N / 2], uint64_t a, uint64_t b, int accumulate) {
  if constexpr (N == 128)
    mma_bf16_ss_n128(d, a, b, accumulate);
  else
    mma_bf16_ss_n192(d, a, b, accumulate);
}

__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  uint32_t u;
  memcpy(&u, &v, 4);
  return u;
}
#endif  // H3_WGMMA_BODY

template <int kBN>
__global__ void __launch_bounds__(kThreads, 1)
    attention_kernel(const __grid_constant__ CUtensorMap tq, const __grid_constant__ CUtensorMap tk,
                     const __grid_constant__ CUtensorMap tv, __nv_bfloat16* __restrict__ o, int nq, int nk, int ld,
                     float scale_log2) {
#ifndef H3_WGMMA_BODY
  __trap();  // built for another architecture too (PTX for compute_80): this kernel exists only as sm_90a
#else
  extern __shared__ uint8_t raw[];
  static_assert(kBN == 128 || kBN == 192, "tiles of 128 or 192 keys");
  constexpr int kKvHalf = kBN * 128;  // bytes of a [kBN x 64] half of a K or V stage
  Smem<kBN>& sm = *reinterpret_cast<Smem<kBN>*>((reinterpret_cast<uintptr_t>(raw) + 1023) & ~uintptr_t(1023));
  const int q0 = blockIdx.x * kBM;
  const int col0 = blockIdx.y * kD;
  const int tiles = (nk + kBN - 1) / kBN;

  if (threadIdx.x == 0) {
    mbar_init(&sm.q_full, 1);
    init_ring(sm, kStages, kConsumers / 32);
  }
  __syncthreads();

  // The producer warpgroup: one thread works, the rest give their registers up.
  if (threadIdx.x >= kConsumers) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
    if (threadIdx.x == kConsumers) {
      mbar_expect_tx(&sm.q_full, kTile);
      tma_load(sm.q, &tq, &sm.q_full, col0, q0);
      tma_load(sm.q + kHalf, &tq, &sm.q_full, col0 + 64, q0);
      for (int j = 0; j < tiles; ++j) {
        const int s = j % kStages;
        const uint32_t phase = (j / kStages) & 1;
        mbar_wait(&sm.k_empty[s], phase ^ 1);
        mbar_expect_tx(&sm.k_full[s], 2 * kKvHalf);
        tma_load(sm.k[s], &tk, &sm.k_full[s], col0, j * kBN);
        tma_load(sm.k[s] + kKvHalf, &tk, &sm.k_full[s], col0 + 64, j * kBN);
        mbar_wait(&sm.v_empty[s], phase ^ 1);
        mbar_expect_tx(&sm.v_full[s], 2 * kKvHalf);
        tma_load(sm.v[s], &tv, &sm.v_full[s], col0, j * kBN);
        tma_load(sm.v[s] + kKvHalf, &tv, &sm.v_full[s], col0 + 64, j * kBN);
      }
    }
    return;
  }

  // A consumer warpgroup: rows [64 g, 64 g + 64) of the tile; this thread holds rows r and r + 8 of its
  // warp's 16 and, of every 8 columns of S or O, columns 2 c and 2 c + 1.
  asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
  const int g = threadIdx.x / 128;
  const int warp = (threadIdx.x / 32) % 4;
  const int lane = threadIdx.x % 32;
  const int c = lane % 4;
  const bool signal = lane == 0;
  const uint32_t q_addr = smem_u32(sm.q) + g * 64 * 128;

  float s_acc[kBN / 2];
  float o_acc[64];
  uint32_t p[kBN / 4];
#pragma unroll
  for (int i = 0; i < 64; ++i) o_acc[i] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY;  // running row maxima, in log2 units of the scaled scores
  float l0 = 0.f, l1 = 0.f;              // this thread's share of the running row sums

  auto issue_qk = [&](int s) {
    const uint32_t k_addr = smem_u32(sm.k[s]);
    fence_regs(s_acc);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kD / 16; ++kk) {
      const uint32_t off = (kk % 4) * 32;
      mma_ss_n<kBN>(s_acc, desc(q_addr + (kk / 4) * kHalf + off, 16, 1024),
                    desc(k_addr + (kk / 4) * kKvHalf + off, 16, 1024), kk > 0);
    }
    wg_commit();
  };
  auto issue_pv = [&](int s) {
    const uint32_t v_addr = smem_u32(sm.v[s]);
    fence_regs(p);
    fence_regs(o_acc);
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < kBN / 16; ++kk) {
      const uint32_t a[4] = {p[4 * kk], p[4 * kk + 1], p[4 * kk + 2], p[4 * kk + 3]};
      mma_bf16_rs_n128(o_acc, a, desc(v_addr + kk * 16 * 128, kKvHalf, 1024));
    }
    wg_commit();
  };
  // Online softmax of tile j in s_acc (scores -> unnormalized weights); returns the factors for O's rows.
  auto softmax = [&](int j, float& corr0, float& corr1) {
    tile_max(s_acc, c, nk - j * kBN, scale_log2, m0, m1, corr0, corr1);
    tile_exp(s_acc, scale_log2, m0, m1, corr0, corr1, l0, l1);
  };
  // S's accumulator layout is the A-operand layout of the P V MMA: k-step t takes S columns [16 t, 16 t +
  // 16).
  auto to_p = [&]() {
#pragma unroll
    for (int i = 0; i < kBN / 4; ++i) p[i] = pack_bf16(s_acc[2 * i], s_acc[2 * i + 1]);
  };

  mbar_wait(&sm.q_full, 0);
  mbar_wait(&sm.k_full[0], 0);
  issue_qk(0);
  wg_wait<0>();
  fence_regs(s_acc);
  if (signal) mbar_arrive(&sm.k_empty[0]);
  {
    float c0, c1;
    softmax(0, c0, c1);
  }
  to_p();
  for (int j = 1; j < tiles; ++j) {
    const int s = j % kStages, sp = (j - 1) % kStages;
    mbar_wait(&sm.k_full[s], (j / kStages) & 1);
    issue_qk(s);
    mbar_wait(&sm.v_full[sp], ((j - 1) / kStages) & 1);
    issue_pv(sp);
    wg_wait<1>();
    fence_regs(s_acc);
    if (signal) mbar_arrive(&sm.k_empty[s]);
    float c0, c1;
    softmax(j, c0, c1);
    // Row 0's sums done before P V's wait (backend/cuda/attention/wgmma.cuh: block_boundary_after): about half the
    // softmax runs beside P V, +3 % (all of it, both sums: up to 4 % slower than without the boundary at 14,908 keys).
    block_boundary_after(l0);
    wg_wait<0>();
    fence_regs(o_acc);
    fence_regs(p);
    if (signal) mbar_arrive(&sm.v_empty[sp]);
    rescale_rows(o_acc, c0, c1);
    to_p();
  }
  {
    const int sp = (tiles - 1) % kStages;
    mbar_wait(&sm.v_full[sp], ((tiles - 1) / kStages) & 1);
    issue_pv(sp);
    wg_wait<0>();
    fence_regs(o_acc);
  }

  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float inv0 = 1.f / l0, inv1 = 1.f / l1;
  // Staged through shared memory and written in 16-byte pieces (4-byte stores straight to global cost ~5 %), in
  // K's stage 0 once both warpgroups' MMAs are done with it (every K tile has been loaded and read by then).
  static_assert(sizeof(sm.k[0]) >= kBM * kD * 2, "K's stage holds the output tile");
  named_sync(5);
  uint8_t* stage = sm.k[0] + g * 64 * kD * 2;
  const int sr0 = warp * 16 + lane / 4, sr1 = sr0 + 8;
#pragma unroll
  for (int i = 0; i < 64; i += 4) {
    const int col = (i / 4) * 8 + 2 * c;
    *reinterpret_cast<__nv_bfloat162*>(stage + (sr0 * kD + col) * 2) =
        __floats2bfloat162_rn(o_acc[i] * inv0, o_acc[i + 1] * inv0);
    *reinterpret_cast<__nv_bfloat162*>(stage + (sr1 * kD + col) * 2) =
        __floats2bfloat162_rn(o_acc[i + 2] * inv1, o_acc[i + 3] * inv1);
  }
  named_sync_wg(3 + g);
  for (int piece = threadIdx.x % 128; piece < 64 * 16; piece += 128) {
    const int row = piece / 16, chunk = piece % 16, grow = q0 + g * 64 + row;
    if (grow < nq)
      *reinterpret_cast<uint4*>(o + static_cast<int64_t>(grow) * ld + col0 + chunk * 8) =
          *reinterpret_cast<const uint4*>(stage + row * kD * 2 + chunk * 16);
  }
#endif
}

}  // namespace

namespace wgmma {

// Writes 1 where this build holds the kernel's sm_90a code (0 from the compute_80 PTX that other GPUs JIT).
__global__ void arch_probe(int* out) {
#ifndef H3_WGMMA_BODY
  *out = 0;
#else
  *out = 1;
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encoder();

const std::string& device_unsupported() {
  static std::string why;
  static std::once_flag once;
  std::call_once(once, [] {
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) {
      why = "no current CUDA device";
      return;
    }
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    if (major != 9 || minor != 0) {
      why = "compute capability " + std::to_string(major) + "." + std::to_string(minor) + " (the kernel is sm_90a)";
      return;
    }
    int* flag = nullptr;
    int host = 0;
    if (cudaMalloc(&flag, sizeof(int)) != cudaSuccess) {
      why = "cudaMalloc failed while probing the build's architectures";
      return;
    }
    arch_probe<<<1, 1>>>(flag);
    const bool ran = cudaMemcpy(&host, flag, sizeof(int), cudaMemcpyDeviceToHost) == cudaSuccess;
    cudaFree(flag);
    if (!ran || host != 1)
      why = "this build has no sm_90a code for it (configure with CMAKE_CUDA_ARCHITECTURES including 90a)";
    else if (!encoder())
      why = "the driver has no cuTensorMapEncodeTiled";
  });
  return why;
}

PFN_cuTensorMapEncodeTiled_v12000 encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  });
  return fn;
}

CUtensorMap tensor_map(const void* base, CUtensorMapDataType type, int64_t rows, int64_t cols, int64_t row_bytes,
                       uint32_t box_cols, uint32_t box_rows, CUtensorMapSwizzle swizzle) {
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(row_bytes)};
  const cuuint32_t box[2] = {box_cols, box_rows};
  const cuuint32_t elem_strides[2] = {1, 1};
  const CUresult r =
      encoder()(&map, type, 2, const_cast<void*>(base), dims, strides, box, elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error("wgmma attention: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                             ") for a [" + std::to_string(rows) + ", " + std::to_string(cols) + "] matrix, " +
                             std::to_string(row_bytes) + " bytes a row");
  return map;
}

}  // namespace wgmma

std::string attention_wgmma_unsupported(const void* q, const void* k, const void* v, const void* o, int64_t nq,
                                        int64_t nk, int64_t heads, int64_t d, int64_t ld) {
  if (d != kD) return "head_dim " + std::to_string(d) + " (the kernel is built for 128)";
  if (nq <= 0 || nk <= 0 || heads <= 0) return "an empty shape";
  if (ld < heads * d || ld % 8 != 0)
    return "row stride " + std::to_string(ld) + " (needs >= heads * 128, a multiple of 8)";
  if (nq > (int64_t{1} << 31) - kBM || nk > (int64_t{1} << 31) - 192 || heads > 65535)
    return "a shape past the grid's range";
  if (!aligned16(q) || !aligned16(k) || !aligned16(v) || !aligned16(o)) return "a pointer not 16-byte aligned";
  return device_unsupported();
}

void attention_wgmma(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                     int64_t d, int64_t ld, cudaStream_t stream) {
  const std::string why = attention_wgmma_unsupported(q, k, v, o, nq, nk, heads, d, ld);
  if (!why.empty()) throw std::runtime_error("wgmma attention cannot run this call: " + why);
  // [rows x 64 columns] boxes: 128-byte swizzled halves of Q's [128 x 128] tile and of K's and V's [bn x 128].
  constexpr int bn = kKeysPerTile;
  auto map = [&](const void* p, int64_t rows, int box_rows) {
    return tensor_map(p, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, rows, ld, ld * 2, 64, static_cast<uint32_t>(box_rows));
  };
  const CUtensorMap tq = map(q, nq, 128), tk = map(k, nk, bn), tv = map(v, nk, bn);
  constexpr int smem = sizeof(Smem<bn>) + 1024;
  static_assert(smem <= 227 * 1024, "the tile's shared memory fits an H100 / H200 SM");
  auto* kernel = attention_kernel<bn>;
  static std::once_flag once;
  static cudaError_t attr = cudaSuccess;
  std::call_once(once, [&] { attr = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem); });
  if (attr != cudaSuccess)
    throw std::runtime_error(std::string("wgmma attention: cudaFuncSetAttribute: ") + cudaGetErrorString(attr));
  const dim3 grid(static_cast<unsigned>((nq + kBM - 1) / kBM), static_cast<unsigned>(heads));
  const float scale_log2 = static_cast<float>(1.0 / std::sqrt(static_cast<double>(d)) * 1.4426950408889634);
  kernel<<<grid, kThreads, smem, stream>>>(tq, tk, tv, static_cast<__nv_bfloat16*>(o), static_cast<int>(nq),
                                           static_cast<int>(nk), static_cast<int>(ld), scale_log2);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) throw std::runtime_error(std::string("wgmma attention launch: ") + cudaGetErrorString(e));
}

}  // namespace h3::cuda
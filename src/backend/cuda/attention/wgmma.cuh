// Shared by our Hopper attention kernels (backend/cuda/attention/wgmma_bf16.cu bf16,
// backend/cuda/attention/wgmma_fp8.cu fp8): mbarrier, TMA and wgmma wrappers over inline PTX, and the host side's
// tensor maps and sm_90a probe. CUDA sources only.
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

// H3_WGMMA_BODY: this compilation pass holds the kernels' real bodies (host pass and sm_90a); the compute_80 PTX
// that other GPUs would JIT gets stubs that trap (the host never launches them there: device_unsupported()).
#if !defined(__CUDA_ARCH__) || (__CUDA_ARCH__ == 900 && defined(__CUDA_ARCH_FEAT_SM90_ALL))
#define H3_WGMMA_BODY 1
#endif

namespace h3::cuda::wgmma {

// "" when the current device runs our sm_90a kernels (compute capability 9.0 and a build holding sm_90a code),
// else why not; checked once per process.
const std::string& device_unsupported();
// A row-major [rows, cols] matrix of `type` with `row_bytes` between rows, read in [box_rows x box_cols] boxes
// with `swizzle` (box_cols * element size must be the swizzle's span or less); throws std::runtime_error.
CUtensorMap tensor_map(const void* base, CUtensorMapDataType type, int64_t rows, int64_t cols, int64_t row_bytes,
                       uint32_t box_cols, uint32_t box_rows, CUtensorMapSwizzle swizzle = CU_TENSOR_MAP_SWIZZLE_128B);
inline bool aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15) == 0;
}

#ifdef H3_WGMMA_BODY
__device__ __forceinline__ uint32_t smem_u32(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* b, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(b)), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* b, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(b)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* b) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_u32(b)) : "memory");
}
// Returns once the phase of parity `parity` has completed (a fresh barrier counts its phase "1" as
// completed).
__device__ __forceinline__ void mbar_wait(uint64_t* b, uint32_t parity) {
  const uint32_t addr = smem_u32(b);
  uint32_t done = 0;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(done)
                 : "r"(addr), "r"(parity)
                 : "memory");
  } while (!done);
}

__device__ __forceinline__ void tma_load(void* dst, const CUtensorMap* map, uint64_t* bar, int col, int row) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, "
      "%3}], [%4];" ::"r"(smem_u32(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(col), "r"(row), "r"(smem_u32(bar))
      : "memory");
}

// A wgmma shared-memory matrix descriptor as its two 32-bit words: the low one holds the address field and the
// leading offset (adding n moves the address by 16 n bytes; no carry leaves the field while addresses stay below
// 256 KB, and shared memory is 228 KB), the high one the stride between 8-row groups and the swizzle (1 the 128-byte
// one: 8 rows of 128 bytes a repeat, stride 1024; 2 the 64-byte one, stride 512; 3 the 32-byte one). Offsets in bytes.
// Kernels that keep a stage's low words and add offsets use the words; desc() builds the whole descriptor.
__host__ __device__ constexpr uint32_t desc_lo(uint32_t addr, uint32_t lead = 16) {
  return ((addr & 0x3FFFF) >> 4) | ((lead >> 4) << 16);
}
__host__ __device__ constexpr uint32_t desc_hi(uint32_t stride, uint32_t swizzle = 1) {
  return (stride >> 4) | (swizzle << 30);
}
__host__ __device__ constexpr uint64_t desc_of(uint32_t lo, uint32_t hi) {
  return (static_cast<uint64_t>(hi) << 32) | lo;
}
__host__ __device__ constexpr uint64_t desc(uint32_t addr, uint32_t lead, uint32_t stride, uint32_t swizzle = 1) {
  return desc_of(desc_lo(addr, lead), desc_hi(stride, swizzle));
}

// ptxas schedules a wgmma wait as early as its basic block allows, above independent work written before it: the
// SASS of both attention kernels showed the wait for tile j-1's P V right below S_j's, so the softmax of tile j ran
// after P V instead of beside it. A warp-uniform branch that never runs (x, a row sum, is never negative; NaN only
// from NaN inputs, and then the branch costs a nanosecond) ends the block after the work that x depends on, and the
// wait cannot rise above it. Three instructions a tile.
__device__ __forceinline__ void block_boundary_after(float x) {
  if (__any_sync(0xffffffffu, !(x >= 0.f))) asm volatile("nanosleep.u32 1;");
}

__device__ __forceinline__ void wg_fence() {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit() {
  asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void wg_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps the compiler from moving reads or writes of these registers across an MMA issue or wait.
__device__ __forceinline__ void named_sync(int id) {
  asm volatile("bar.sync %0, 256;\n" ::"r"(id) : "memory");
}
// The 128 threads of one warpgroup meet at barrier `id`.
__device__ __forceinline__ void named_sync_wg(int id) {
  asm volatile("bar.sync %0, 128;\n" ::"r"(id) : "memory");
}
__device__ __forceinline__ void named_arrive(int id) {
  asm volatile("bar.arrive %0, 256;\n" ::"r"(id) : "memory");
}

template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

// Shared by both kernels' consumer warpgroups, on an m64n128 f32 accumulator of which this thread holds rows r and
// r + 8 (indices 4 i + {0, 1} and 4 i + {2, 3}), columns 8 i + 2 c + {0, 1}.

// The ring's barriers: full / empty for K and V per stage (empty: one arrival per consumer warp), then the fence
// that publishes them and any barrier the kernel initialized before (its Q's).
template <class Smem>
__device__ __forceinline__ void init_ring(Smem& sm, int stages, int consumer_warps) {
  for (int s = 0; s < stages; ++s) {
    mbar_init(&sm.k_full[s], 1);
    mbar_init(&sm.v_full[s], 1);
    mbar_init(&sm.k_empty[s], consumer_warps);
    mbar_init(&sm.v_empty[s], consumer_warps);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

// Rows r and r + 8's maxima over the four threads (lane % 4) that hold their columns.
__device__ __forceinline__ void quad_max(float& x0, float& x1) {
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 1));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 1));
  x0 = fmaxf(x0, __shfl_xor_sync(0xffffffffu, x0, 2));
  x1 = fmaxf(x1, __shfl_xor_sync(0xffffffffu, x1, 2));
}

// The online softmax's first half for a tile of 2 N keys (an m64n(2N) f32 accumulator, or several m64n128 ones side
// by side: the same column order) with `valid` keys: the rest set to -inf, the rows' maxima m0, m1 (log2 units of
// the scores times scale_log2) moved on, and the factors for what was summed under the old ones.
template <int N>
__device__ __forceinline__ void tile_max(float (&s)[N], int c, int valid, float scale_log2, float& m0, float& m1,
                                         float& corr0, float& corr1) {
  if (valid < 2 * N) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      const int col = (i / 4) * 8 + 2 * c + (i % 2);
      if (col >= valid) s[i] = -INFINITY;
    }
  }
  float x0 = -INFINITY, x1 = -INFINITY;
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    x0 = fmaxf(x0, fmaxf(s[i], s[i + 1]));
    x1 = fmaxf(x1, fmaxf(s[i + 2], s[i + 3]));
  }
  quad_max(x0, x1);
  const float n0 = fmaxf(m0, x0 * scale_log2), n1 = fmaxf(m1, x1 * scale_log2);
  corr0 = ex2(m0 - n0);
  corr1 = ex2(m1 - n1);
  m0 = n0;
  m1 = n1;
}

// The second half: scores -> 2^(s scale_log2 - b) in place, and the rows' running sums l0, l1 (this thread's share)
// carried over with the factors.
template <int N>
__device__ __forceinline__ void tile_exp(float (&s)[N], float scale_log2, float b0, float b1, float corr0, float corr1,
                                         float& l0, float& l1) {
  float sum0 = 0.f, sum1 = 0.f;
#pragma unroll
  for (int i = 0; i < N; i += 4) {
    s[i] = ex2(fmaf(s[i], scale_log2, -b0));
    s[i + 1] = ex2(fmaf(s[i + 1], scale_log2, -b0));
    s[i + 2] = ex2(fmaf(s[i + 2], scale_log2, -b1));
    s[i + 3] = ex2(fmaf(s[i + 3], scale_log2, -b1));
    sum0 += s[i] + s[i + 1];
    sum1 += s[i + 2] + s[i + 3];
  }
  l0 = fmaf(l0, corr0, sum0);
  l1 = fmaf(l1, corr1, sum1);
}

// O's rows times the factors, skipped while no row maximum of the warp moved (the factors are exactly 1 then): the
// same bits, fewer instructions once the maxima settle.
__device__ __forceinline__ void rescale_rows(float (&o)[64], float c0, float c1) {
  if (__any_sync(0xffffffffu, c0 != 1.f || c1 != 1.f)) {
#pragma unroll
    for (int i = 0; i < 64; i += 4) {
      o[i] *= c0;
      o[i + 1] *= c0;
      o[i + 2] *= c1;
      o[i + 3] *= c1;
    }
  }
}
#endif  // H3_WGMMA_BODY

}  // namespace h3::cuda::wgmma

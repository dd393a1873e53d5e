// Instruction-throughput probe for the attention softmax's non-MMA work on Hopper: how many ex2 (f32, f16x2,
// bf16x2) and f32 -> e4m3x2 / bf16x2 conversions one SM retires per clock, alone and interleaved (an interleaved
// pair that takes the sum of the two times shares a pipe; one that takes the longer time does not).
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a bench/pipe_probe.cu -o /tmp/pipe_probe && /tmp/pipe_probe
// Prints one line per probe: lane-operations per clock per SM (clock64 of each block, median over blocks).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <vector>

namespace {

constexpr int kIters = 2048;
constexpr int kLanes = 8;  // independent chains per thread

__device__ __forceinline__ float ex2f(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t ex2h2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint32_t ex2bf2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint16_t cvt_e4m3x2(float a, float b) {
  uint16_t r;
  asm volatile("cvt.rn.satfinite.e4m3x2.f32 %0, %2, %1;" : "=h"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ uint16_t cvt_e4m3x2_h2(uint32_t a) {
  uint16_t r;
  asm volatile("cvt.rn.satfinite.e4m3x2.f16x2 %0, %1;" : "=h"(r) : "r"(a));
  return r;
}
__device__ __forceinline__ uint32_t cvt_h2(float a, float b) {
  uint32_t r;
  asm volatile("cvt.rn.f16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(a), "f"(b));
  return r;
}
__device__ __forceinline__ uint32_t cvt_bf2(float a, float b) {
  uint32_t r;
  asm volatile("cvt.rn.bf16x2.f32 %0, %2, %1;" : "=r"(r) : "f"(a), "f"(b));
  return r;
}

// kind: 0 ex2.f32, 1 ex2.f16x2, 2 ex2.bf16x2, 3 cvt e4m3x2 from f32 pairs, 4 cvt f16x2 from f32 pairs,
// 5 ex2.f32 + e4m3 cvt interleaved (one cvt per two ex2, as in the softmax), 6 cvt bf16x2, 7 cvt e4m3x2 from f16x2,
// 8 FFMA (reference: 128 a clock expected)
template <int kKind>
__global__ void probe(float* sink, long long* cycles, float seed) {
  float f[kLanes];
  uint32_t h[kLanes];
#pragma unroll
  for (int i = 0; i < kLanes; ++i) {
    f[i] = seed * (i + 1) + threadIdx.x * 1e-6f;
    h[i] = __float_as_uint(f[i]) ^ 0x3c003c00u;
  }
  __syncthreads();
  const long long t0 = clock64();
  for (int it = 0; it < kIters; ++it) {
#pragma unroll
    for (int i = 0; i < kLanes; ++i) {
      if constexpr (kKind == 0) f[i] = ex2f(f[i]) * -0.5f;
      if constexpr (kKind == 1) h[i] = ex2h2(h[i]) ^ 0x80008000u;
      if constexpr (kKind == 2) h[i] = ex2bf2(h[i]) ^ 0x80008000u;
      if constexpr (kKind == 3) h[i] += cvt_e4m3x2(f[i], __uint_as_float(h[i]));
      if constexpr (kKind == 4) h[i] ^= cvt_h2(f[i], __uint_as_float(h[i]));
      if constexpr (kKind == 5) {
        f[i] = ex2f(f[i]) * -0.5f;
        if (i % 2) h[i] += cvt_e4m3x2(f[i], f[i - 1]);
      }
      if constexpr (kKind == 6) h[i] ^= cvt_bf2(f[i], __uint_as_float(h[i]));
      if constexpr (kKind == 7) h[i] += cvt_e4m3x2_h2(h[i]);
      if constexpr (kKind == 8) f[i] = fmaf(f[i], 0.999f, 1e-3f);
    }
  }
  const long long t1 = clock64();
  float acc = 0.f;
#pragma unroll
  for (int i = 0; i < kLanes; ++i) acc += f[i] + __uint_as_float(h[i]);
  if (acc == 12345.f) sink[threadIdx.x] = acc;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <int kKind>
void run(const char* name, double ops_per_lane_iter) {
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int threads = 1024, blocks = sms;  // one block per SM: 32 warps
  float* sink;
  long long* cycles;
  cudaMalloc(&sink, threads * sizeof(float));
  cudaMalloc(&cycles, blocks * sizeof(long long));
  probe<kKind><<<blocks, threads>>>(sink, cycles, 0.37f);  // warm
  probe<kKind><<<blocks, threads>>>(sink, cycles, 0.37f);
  cudaDeviceSynchronize();
  std::vector<long long> c(blocks);
  cudaMemcpy(c.data(), cycles, blocks * sizeof(long long), cudaMemcpyDeviceToHost);
  std::sort(c.begin(), c.end());
  const double med = static_cast<double>(c[c.size() / 2]);
  const double ops = double(threads) * kIters * kLanes * ops_per_lane_iter;
  std::printf("%-34s %8.2f lane-ops/clk/SM  (%.0f cycles)\n", name, ops / med, med);
  cudaFree(sink);
  cudaFree(cycles);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) std::printf("  error: %s\n", cudaGetErrorString(e));
}

}  // namespace

int main() {
  run<8>("ffma f32 (values)", 1);
  run<0>("ex2.approx.f32 (values)", 1);
  run<1>("ex2.approx.f16x2 (values, 2 each)", 2);
  run<2>("ex2.approx.bf16x2 (values, 2 each)", 2);
  run<3>("cvt e4m3x2.f32 (instructions)", 1);
  run<7>("cvt e4m3x2.f16x2 (instructions)", 1);
  run<4>("cvt f16x2.f32 (instructions)", 1);
  run<6>("cvt bf16x2.f32 (instructions)", 1);
  run<5>("ex2.f32 + cvt e4m3x2 per 2 (ex2s)", 1);
  return 0;
}

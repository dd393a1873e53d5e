// How many exponentials an SM computes per clock, by instruction form (issue 40: at head dim 128 the FP8 attention
// kernel's exponentials take as long as its MMAs, docs/notes.md "(lead, sixth part)"; the f16 pairs were tried inside
// the kernel and lost without telling whether the unit itself takes a pair as fast as one value). Each thread runs
// 8 independent chains of `ex2` with one multiply between steps (keeping the values in range); the kernel's cycles
// come from clock64 on every SM, its time from events. Prints exponentials per clock per SM for ex2.approx.ftz.f32,
// ex2.approx.f16x2 and ex2.approx.ftz.bf16x2 (a pair counted as two), and the same with no exponential (the multiplies
// alone: the loop's floor).
//
// Measured on an H100 (docs/notes.md, "(lead, sixth part)"): 15.95 / 15.89 / 15.88 a clock an SM. ptxas splits a pair
// into two MUFU instructions, so the pairs take the unit no faster than single values.
//
//   nvcc -O3 -std=c++17 -arch=sm_90a bench/mufu_rate.cu -o mufu_rate && ./mufu_rate
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace {

constexpr int kChains = 8;
constexpr int kIters = 4096;

enum Form { kF32, kF16x2, kBf16x2, kNone };

__device__ __forceinline__ float ex2_f32(float x) {
  float y;
  asm volatile("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ uint32_t ex2_f16x2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
__device__ __forceinline__ uint32_t ex2_bf16x2(uint32_t x) {
  uint32_t y;
  asm volatile("ex2.approx.ftz.bf16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}

template <Form F>
__global__ void rate_kernel(float* out, unsigned long long* cycles) {
  const unsigned long long t0 = clock64();
  float acc = 0.f;
  if constexpr (F == kF32 || F == kNone) {
    float x[kChains];
#pragma unroll
    for (int c = 0; c < kChains; ++c) x[c] = -0.01f * static_cast<float>(threadIdx.x % 7 + c);
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
      for (int c = 0; c < kChains; ++c) x[c] = (F == kF32 ? ex2_f32(x[c]) : x[c]) * -0.75f;
    }
#pragma unroll
    for (int c = 0; c < kChains; ++c) acc += x[c];
  } else {
    uint32_t x[kChains];
    const __half2 hm = __float2half2_rn(-0.75f);
    const __nv_bfloat162 bm = __float2bfloat162_rn(-0.75f);
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      const float v = -0.01f * static_cast<float>(threadIdx.x % 7 + c);
      if constexpr (F == kF16x2) {
        const __half2 h = __float2half2_rn(v);
        x[c] = *reinterpret_cast<const uint32_t*>(&h);
      } else {
        const __nv_bfloat162 b = __float2bfloat162_rn(v);
        x[c] = *reinterpret_cast<const uint32_t*>(&b);
      }
    }
    for (int i = 0; i < kIters; ++i) {
#pragma unroll
      for (int c = 0; c < kChains; ++c) {
        if constexpr (F == kF16x2) {
          uint32_t y = ex2_f16x2(x[c]);
          __half2 h = __hmul2(*reinterpret_cast<__half2*>(&y), hm);
          x[c] = *reinterpret_cast<uint32_t*>(&h);
        } else {
          uint32_t y = ex2_bf16x2(x[c]);
          __nv_bfloat162 b = __hmul2(*reinterpret_cast<__nv_bfloat162*>(&y), bm);
          x[c] = *reinterpret_cast<uint32_t*>(&b);
        }
      }
    }
#pragma unroll
    for (int c = 0; c < kChains; ++c) {
      if constexpr (F == kF16x2)
        acc += __low2float(*reinterpret_cast<__half2*>(&x[c]));
      else
        acc += __low2float(*reinterpret_cast<__nv_bfloat162*>(&x[c]));
    }
  }
  const unsigned long long t1 = clock64();
  if (threadIdx.x == 0) atomicMax(cycles + blockIdx.x, t1 - t0);
  if (acc == 12345.f) out[blockIdx.x * blockDim.x + threadIdx.x] = acc;  // keeps the work; never true
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    std::fprintf(stderr, "mufu_rate: %s: %s\n", what, cudaGetErrorString(e));
    std::exit(1);
  }
}

template <Form F>
void run(const char* name, int sms, int threads, int blocks_per_sm) {
  const int blocks = sms * blocks_per_sm;
  float* out = nullptr;
  unsigned long long* cycles = nullptr;
  check(cudaMalloc(&out, sizeof(float) * blocks * threads), "malloc");
  check(cudaMalloc(&cycles, sizeof(unsigned long long) * blocks), "malloc");
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  double best_ms = 1e30, best_cycles = 0;
  for (int rep = 0; rep < 4; ++rep) {  // the first warms the clock up
    check(cudaMemset(cycles, 0, sizeof(unsigned long long) * blocks), "memset");
    cudaEventRecord(e0);
    rate_kernel<F><<<blocks, threads>>>(out, cycles);
    cudaEventRecord(e1);
    check(cudaEventSynchronize(e1), "kernel");
    float ms = 0;
    cudaEventElapsedTime(&ms, e0, e1);
    unsigned long long* host = new unsigned long long[blocks];
    cudaMemcpy(host, cycles, sizeof(unsigned long long) * blocks, cudaMemcpyDeviceToHost);
    unsigned long long mx = 0;
    for (int b = 0; b < blocks; ++b) mx = host[b] > mx ? host[b] : mx;
    delete[] host;
    if (rep > 0 && ms < best_ms) best_ms = ms, best_cycles = static_cast<double>(mx);
  }
  const double per_value = (F == kF16x2 || F == kBf16x2) ? 2.0 : 1.0;
  const double exps = F == kNone ? 0.0 : per_value * kChains * kIters * static_cast<double>(threads) * blocks;
  // Blocks of one SM run together (blocks_per_sm resident at once), so an SM's cycles are one block's.
  const double per_clock_sm = exps / sms / best_cycles;
  std::printf("%-22s %9.3f ms %12.0f cycles  %7.2f exponentials / clock / SM  (%.2f GHz)  %8.1f G/s\n", name, best_ms,
              best_cycles, per_clock_sm, best_cycles / (best_ms * 1e-3) / 1e9, exps / (best_ms * 1e-3) / 1e9);
  cudaFree(out);
  cudaFree(cycles);
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  check(cudaGetDevice(&dev), "device");
  check(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
  cudaDeviceProp p{};
  cudaGetDeviceProperties(&p, dev);
  std::printf("mufu_rate: %s, %d SMs; %d chains x %d steps a thread, 4 blocks of 256 threads an SM\n", p.name, sms,
              kChains, kIters);
  run<kNone>("multiply only", sms, 256, 4);
  run<kF32>("ex2.approx.ftz.f32", sms, 256, 4);
  run<kF16x2>("ex2.approx.f16x2", sms, 256, 4);
  run<kBf16x2>("ex2.approx.ftz.bf16x2", sms, 256, 4);
  return 0;
}

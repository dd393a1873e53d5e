// The SM clock read from the device itself: one thread counts SM cycles against the global timer.
#include "clock_probe.h"

#include <cstdint>

namespace {

__device__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// SM cycles per microsecond (= MHz) over ~20 us of the global timer, written to out[slot].
__global__ void clock_probe(float* out, int slot) {
  const uint64_t t0 = global_ns();
  const long long c0 = clock64();
  uint64_t t = t0;
  while (t - t0 < 20000) t = global_ns();
  const long long c1 = clock64();
  out[slot] = static_cast<float>(c1 - c0) / (static_cast<float>(t - t0) * 1e-3f);
}

}  // namespace

void launch_clock_probe(float* out, int slot, cudaStream_t s) {
  clock_probe<<<1, 1, 0, s>>>(out, slot);
}

// The FP8 scales that bound a tensor from its op's parameters (no pass over the data), and the per-row activation
// scales, are rounded up to a power of two: dividing by one is then exact as a multiply by its inverse, which the GPU
// kernels use, and e4m3 keeps the same relative precision at any scale (values stay within 448 of it; at most one
// binade of headroom goes unused).
// Shared by the CPU backend, the CUDA kernels and the model's q / k bounds, so all compute the same bits.
#pragma once
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define H3_FP8_BOUND_HD __host__ __device__
#else
#define H3_FP8_BOUND_HD
#endif

namespace h3::ops {

// The smallest power of two >= s, for a positive normal float s (the bounds are clamped to >= 1e-12 first).
H3_FP8_BOUND_HD inline float round_up_pow2(float s) {
  uint32_t u;
  std::memcpy(&u, &s, sizeof u);
  if (u & 0x7fffffu) u = (u & 0xff800000u) + 0x800000u;
  std::memcpy(&s, &u, sizeof u);
  return s;
}

}  // namespace h3::ops

#undef H3_FP8_BOUND_HD

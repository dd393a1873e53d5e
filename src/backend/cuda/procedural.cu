// Procedural weights generated on the device (backend/cuda/procedural.h), as io/procedural.cpp makes them on
// the host.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/procedural.h"

namespace h3::cuda {

namespace {

__device__ __forceinline__ uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

__global__ void procedural_kernel(uint64_t base, double scale, double offset, float* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const double u = static_cast<double>(splitmix64(base + static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * 2.0 - 1.0;
    out[i] = static_cast<float>(offset + u * scale);
  }
}

}  // namespace

cudaError_t procedural(uint64_t base, double scale, double offset, float* out, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  procedural_kernel<<<blocks_for(n), kThreads, 0, s>>>(base, scale, offset, out, n);
  return cudaGetLastError();
}

}  // namespace h3::cuda

// Row gathers and scatters by an index (backend/cuda/rows.h): whole rows copied in 16-, 4-, 2- or 1-byte units.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rows.h"

namespace h3::cuda {

namespace {

template <typename U, bool kScatter>
__global__ void move_rows_kernel(const U* x, const int32_t* idx, U* out, int64_t n, int64_t units) {
  const int64_t total = n * units;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / units, u = i % units, other = idx[r];
    if (kScatter)
      out[other * units + u] = x[i];
    else
      out[i] = x[other * units + u];
  }
}

template <bool kScatter>
cudaError_t move_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  auto go = [&](auto unit) {
    using U = decltype(unit);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    move_rows_kernel<U, kScatter>
        <<<blocks_for(n * units), kThreads, 0, s>>>(static_cast<const U*>(x), idx, static_cast<U*>(out), n, units);
  };
  const auto align = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out);
  if (row_bytes % 16 == 0 && align % 16 == 0)
    go(uint4{});
  else if (row_bytes % 4 == 0 && align % 4 == 0)
    go(uint32_t{});
  else if (row_bytes % 2 == 0)
    go(uint16_t{});
  else
    go(uint8_t{});
  return cudaGetLastError();
}

}  // namespace

cudaError_t gather_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  return move_rows<false>(x, idx, out, n, row_bytes, s);
}

cudaError_t scatter_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  return move_rows<true>(x, idx, out, n, row_bytes, s);
}

}  // namespace h3::cuda

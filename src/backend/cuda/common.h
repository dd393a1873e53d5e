// Internal to the CUDA backend: error checks, the backend's one compute stream, the library handles and a
// workspace. Nothing outside src/backend/cuda includes this.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

#include "core/error.h"
#include "core/numerics.h"

namespace h3::cuda {

// Throws h3::Error naming the call, the file:line and CUDA's message.
[[noreturn]] void throw_cuda(cudaError_t e, const char* what, const char* file, int line);
#define H3_CUDA(call)                                                                       \
  do {                                                                                      \
    cudaError_t h3_err_ = (call);                                                           \
    if (h3_err_ != cudaSuccess) ::h3::cuda::throw_cuda(h3_err_, #call, __FILE__, __LINE__); \
  } while (0)

cudaStream_t stream();
// The backend's numerics (GpuOptions): deterministic mode, FP8 attention, FP8 accumulation.
bool deterministic();
const Numerics& numerics();
bool gemm_tune();
// Device scratch of at least `bytes`, valid until the next call on the stream that asks for more.
void* workspace(size_t bytes);
// Device memory from the backend's caching allocator.
void* device_alloc(size_t bytes);
void device_free(void* p, size_t bytes);

}  // namespace h3::cuda

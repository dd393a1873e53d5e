// Element-wise dtype conversion of device buffers (backend/cuda/convert.h). Built with --fmad=false, so that a*b+c
// rounds twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/convert.h"
#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"

namespace h3::cuda {

namespace {

__device__ double load_any(const void* p, ElemType t, int64_t i) {
  switch (t) {
    case ElemType::f32:
      return static_cast<const float*>(p)[i];
    case ElemType::bf16:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i]);
    case ElemType::f64:
      return static_cast<const double*>(p)[i];
    case ElemType::fp8_e4m3:
      return static_cast<float>(static_cast<const __nv_fp8_e4m3*>(p)[i]);
    case ElemType::i32:
      return static_cast<const int32_t*>(p)[i];
    case ElemType::i64:
      return static_cast<double>(static_cast<const int64_t*>(p)[i]);
  }
  return 0;
}

__global__ void convert_kernel(const void* src, ElemType st_, void* dst, ElemType dt, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    if ((st_ == ElemType::i64 || st_ == ElemType::i32) && (dt == ElemType::i64 || dt == ElemType::i32)) {
      const int64_t v =
          st_ == ElemType::i64 ? static_cast<const int64_t*>(src)[i] : static_cast<const int32_t*>(src)[i];
      if (dt == ElemType::i64)
        static_cast<int64_t*>(dst)[i] = v;
      else
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
      continue;
    }
    const double v = load_any(src, st_, i);
    // Narrow formats round from the f32 value, as the host conversion does.
    const float f = static_cast<float>(v);
    switch (dt) {
      case ElemType::f64:
        static_cast<double*>(dst)[i] = v;
        break;
      case ElemType::f32:
        static_cast<float*>(dst)[i] = f;
        break;
      case ElemType::bf16:
        static_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(f);
        break;
      case ElemType::fp8_e4m3:
        static_cast<__nv_fp8_e4m3*>(dst)[i] = __nv_fp8_e4m3(f);
        break;
      case ElemType::i32:
        static_cast<int32_t*>(dst)[i] = static_cast<int32_t>(v);
        break;
      case ElemType::i64:
        static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(v);
        break;
    }
  }
}

}  // namespace

cudaError_t convert(const void* src, ElemType st_, void* dst, ElemType dt, int64_t n, cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  convert_kernel<<<blocks_for(n), kThreads, 0, s>>>(src, st_, dst, dt, n);
  return cudaGetLastError();
}

}  // namespace h3::cuda

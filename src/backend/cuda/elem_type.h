// The element types of the CUDA backend's kernel launchers (its mapping from DType: backend/cuda/runtime.cpp).
#pragma once
#include <cstdint>

namespace h3::cuda {

enum class ElemType : uint8_t { f32, bf16, f64, fp8_e4m3, i32, i64 };

}  // namespace h3::cuda

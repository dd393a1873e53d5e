// Argument checks shared by the CPU op files (launcher side: shapes and dtypes, never in inner loops).
#pragma once
#include "core/tensor.h"

namespace h3::ops::cpu_checks {

inline void need_float(const Tensor& t, const char* op, const char* arg) {
  H3_ASSERT(t.device() == Device::cpu, "{}: {} is not a host tensor", op, arg);
  H3_ASSERT(t.dtype() == DType::f32 || t.dtype() == DType::f64, "{}: {} must be f32 or f64, got {}", op, arg,
            t.describe());
}
inline void same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  H3_ASSERT(a.dtype() == b.dtype(), "{}: dtype mismatch {} vs {}", op, a.describe(), b.describe());
}

}  // namespace h3::ops::cpu_checks

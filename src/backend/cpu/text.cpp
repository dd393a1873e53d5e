// CPU entries of ops_text.h: on host tensors (f32, f64) each is its ops.h counterpart (see ops_text.h).
#include "backend/cpu/ops.h"

namespace h3::cpu {

Tensor rms_norm_rounded(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  return rms_norm(x, &w, group, eps);
}

Tensor linear_acc(const Tensor& x, const Tensor& w) {
  return linear(x, w, nullptr);
}

}  // namespace h3::cpu

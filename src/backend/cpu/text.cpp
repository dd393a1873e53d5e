// CPU ops of ops_text.h: on host tensors (f32, f64) each is its ops.h counterpart (see ops_text.h).
#include "ops/device_ops.h"
#include "ops/ops.h"
#include "ops/ops_text.h"

namespace h3::ops {

Tensor rms_norm_rounded(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  H3_DEVICE_DISPATCH(x, rms_norm_rounded, x, w, group, eps);
  return rms_norm(x, &w, group, eps);
}

Tensor linear_acc(const Tensor& x, const Tensor& w) {
  H3_DEVICE_DISPATCH(x, linear_acc, x, w);
  return linear(x, w);
}

}  // namespace h3::ops

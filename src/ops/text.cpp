// The front door of ops_text.h: shapes and dtypes checked once, then the entry of the backend holding x
// (ops/backend_ops.h).
#include "ops/ops_text.h"

#include "ops/checks.h"

namespace h3::ops {

Tensor rms_norm_rounded(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  const BackendOps& be = check::backend_of(x, "rms_norm_rounded");
  check::act(be, x, "rms_norm_rounded", "x");
  check::param(be, x, w, "rms_norm_rounded", "w");
  const int64_t cols = check::row_width(x);
  H3_ASSERT(group > 0 && cols % group == 0 && w.numel() == group,
            "rms_norm_rounded: group {} must divide the row of {} and match the weight {}", group, x.describe(),
            w.describe());
  return H3_OP_CALL(be, rms_norm_rounded, x, w, group, eps);
}

Tensor linear_acc(const Tensor& x, const Tensor& w) {
  const BackendOps& be = check::backend_of(x, "linear_acc");
  check::act(be, x, "linear_acc", "x");
  // A backend that converts parameters takes x in any float dtype it computes in (converted to w's); else one dtype.
  if (be.converts_params)
    check::act(be, w, "linear_acc", "w");
  else
    check::same(x, w, "linear_acc", "w");
  H3_ASSERT(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1), "linear_acc: x {} vs w {}", x.describe(),
            w.describe());
  return H3_OP_CALL(be, linear_acc, x, w);
}

}  // namespace h3::ops

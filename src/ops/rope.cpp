// The front door of ops/rope.h: shapes and dtypes checked once, then the entry of the backend holding x
// (ops/backend_ops.h).
#include "ops/rope.h"

#include "ops/checks.h"

namespace h3::ops {

namespace {

// rope's table rules, shared with qk_norm_rope(_fp8): x [N, heads * d], cos/sin [N, R], R even, R <= d.
void check_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t d, const char* op) {
  H3_ASSERT(d > 0 && x.ndim() == 2 && cos.ndim() == 2, "{}: head_dim {} with x {} cos {}", op, d, x.describe(),
            cos.describe());
  const int64_t r = cos.dim(1);
  H3_ASSERT(cos.dim(0) == x.dim(0) && sin.shape() == cos.shape() && r % 2 == 0 && r <= d && x.dim(1) % d == 0,
            "{}: x {} cos {} sin {} head_dim {}", op, x.describe(), cos.describe(), sin.describe(), d);
}

}  // namespace

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16) {
  const BackendOps& be = backend_of(x, "rope");
  act(be, x, "rope", "x");
  same(x, {{cos, "cos"}, {sin, "sin"}}, "rope");
  check_rope(x, cos, sin, head_dim, "rope");
  return H3_OP_CALL(be, rope, x, cos, sin, head_dim, bf16);
}

Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                    const Tensor& sin, bool bf16) {
  const BackendOps& be = backend_of(x, "qk_norm_rope");
  act(be, x, "qk_norm_rope", "x");
  same(x, {{w, "w"}, {cos, "cos"}, {sin, "sin"}}, "qk_norm_rope");
  check_rope(x, cos, sin, head_dim, "qk_norm_rope");
  H3_ASSERT(w.numel() == head_dim, "qk_norm_rope: weight {} for head_dim {}", w.describe(), head_dim);
  return H3_OP_CALL(be, qk_norm_rope, x, w, head_dim, eps, cos, sin, bf16);
}

Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                        const Tensor& sin, bool bf16, const Tensor& scale) {
  const char* op = "qk_norm_rope_fp8";
  const BackendOps& be = backend_of(x, op);
  act(be, x, op, "x");
  same(x, {{w, "w"}, {cos, "cos"}, {sin, "sin"}}, op);
  check_rope(x, cos, sin, head_dim, op);
  H3_ASSERT(w.numel() == head_dim, "{}: weight {} for head_dim {}", op, w.describe(), head_dim);
  H3_ASSERT(scale.numel() == 1 && scale.dtype() == DType::f32, "{}: scale must be one f32, got {}", op,
            scale.describe());
  return H3_OP_CALL(be, qk_norm_rope_fp8, x, w, head_dim, eps, cos, sin, bf16, scale);
}

}  // namespace h3::ops

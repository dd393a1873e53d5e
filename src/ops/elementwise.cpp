// The front door of ops/elementwise.h: shapes and dtypes checked once, then the entry of the backend holding the
// first tensor (ops/backend_ops.h).
#include "ops/elementwise.h"

#include "ops/checks.h"

namespace h3::ops {

Tensor add(const Tensor& x, const Tensor& y) {
  const BackendOps& be = backend_of(x, "add");
  act(be, x, "add", "x");
  same(x, y, "add", "y");
  H3_ASSERT(x.shape() == y.shape(), "add: {} vs {}", x.describe(), y.describe());
  return H3_OP_CALL(be, add, x, y);
}

Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16) {
  const BackendOps& be = backend_of(h, "modulate");
  act(be, h, "modulate", "h");
  same(h, {{shift, "shift"}, {scale, "scale"}}, "modulate");
  check::tables(h, shift, scale, "modulate");
  check::index(be, idx, h.dim(0), shift.dim(0), "modulate");
  return H3_OP_CALL(be, modulate, h, shift, scale, idx, bf16);
}

Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16) {
  const BackendOps& be = backend_of(x, "gate_residual");
  act(be, x, "gate_residual", "x");
  same(x, {{gate, "gate"}, {y, "y"}}, "gate_residual");
  H3_ASSERT(x.ndim() == 2 && y.ndim() == 2 && gate.ndim() == 2, "gate_residual: 2-D tensors needed, got {} {} {}",
            x.describe(), y.describe(), gate.describe());
  H3_ASSERT(y.shape() == x.shape() && gate.dim(1) == x.dim(1), "gate_residual: x {} y {} gate {}", x.describe(),
            y.describe(), gate.describe());
  check::index(be, idx, x.dim(0), gate.dim(0), "gate_residual");
  return H3_OP_CALL(be, gate_residual, x, gate, idx, y, bf16);
}

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  const BackendOps& be = backend_of(x, "add_scaled");
  check::add_scaled(be, x, y, scale, "add_scaled");
  return H3_OP_CALL(be, add_scaled, x, y, scale);
}

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
  const BackendOps& be = backend_of(x, "divide_clamp");
  act(be, x, "divide_clamp", "x");
  H3_ASSERT(divisor != 0, "divide_clamp: divisor 0");
  return H3_OP_CALL(be, divide_clamp, x, divisor, lo, hi);
}

void round_bf16_(Tensor& x) {
  const BackendOps& be = backend_of(x, "round_bf16_");
  H3_ASSERT(!x.on_device(), "round_bf16_ emulates bf16 on the CPU; device tensors hold bf16 values already");
  if (x.dtype() != DType::f32) return;
  H3_OP_CALL(be, round_bf16_, x);
}

}  // namespace h3::ops

// The front door of ops/activation.h: shapes and dtypes checked once, then the entry of the backend holding the
// input (ops/backend_ops.h).
#include "ops/activation.h"

#include "ops/checks.h"

namespace h3::ops {

namespace {

void check_swiglu(const BackendOps& be, const Tensor& u, const char* op) {
  act(be, u, op, "u");
  H3_ASSERT(u.ndim() == 2 && u.dim(1) % 2 == 0, "{}: [N, 2F] input needed, got {}", op, u.describe());
}

}  // namespace

Tensor silu(const Tensor& x) {
  return check::unary<&BackendOps::silu>(x, "silu");
}

Tensor swiglu(const Tensor& u, bool bf16) {
  const BackendOps& be = backend_of(u, "swiglu");
  check_swiglu(be, u, "swiglu");
  return H3_OP_CALL(be, swiglu, u, bf16);
}

Tensor swiglu_fp8_rows(const Tensor& u, bool bf16) {
  const BackendOps& be = backend_of(u, "swiglu_fp8_rows");
  check_swiglu(be, u, "swiglu_fp8_rows");
  return H3_OP_CALL(be, swiglu_fp8_rows, u, bf16);
}

Tensor gelu_tanh(const Tensor& x) {
  return check::unary<&BackendOps::gelu_tanh>(x, "gelu_tanh");
}

Tensor gelu_erf(const Tensor& x) {
  return check::unary<&BackendOps::gelu_erf>(x, "gelu_erf");
}

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
  const BackendOps& be = backend_of(x, "snake_beta");
  act(be, x, "snake_beta", "x");
  param(be, x, alpha, "snake_beta", "alpha");
  param(be, x, beta, "snake_beta", "beta");
  H3_ASSERT(x.ndim() == 3 && alpha.numel() == x.dim(1) && beta.numel() == x.dim(1), "snake_beta: x {} alpha {} beta {}",
            x.describe(), alpha.describe(), beta.describe());
  return H3_OP_CALL(be, snake_beta, x, alpha, beta, gain);
}

}  // namespace h3::ops

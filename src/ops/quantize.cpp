// The front door of ops/quantize.h: shapes and dtypes checked once, then the entry of the backend holding the
// input (ops/backend_ops.h).
#include "ops/quantize.h"

#include "ops/checks.h"

namespace h3::ops {

namespace {

void check_rows_2d(const Tensor& x, const char* op) {
  H3_ASSERT(x.ndim() == 2, "{}: a 2-D [rows, cols] input needed, got {}", op, x.describe());
}

}  // namespace

Tensor quantize_fp8(const Tensor& w) {
  return check::unary<&BackendOps::quantize_fp8>(w, "quantize_fp8", "w");
}

Tensor quantize_fp8_rows(const Tensor& x) {
  const BackendOps& be = backend_of(x, "quantize_fp8_rows");
  act(be, x, "quantize_fp8_rows", "x");
  check_rows_2d(x, "quantize_fp8_rows");
  return H3_OP_CALL(be, quantize_fp8_rows, x);
}

Tensor dequantize_fp8(const Tensor& q) {
  const BackendOps& be = backend_of(q, "dequantize_fp8");
  H3_ASSERT(q.dtype() == DType::fp8_e4m3 && q.ndim() == 2 && q.scale() && q.scale()->dtype() == DType::f32 &&
                q.scale()->device() == q.device() && (q.scale()->numel() == 1 || q.scale()->numel() == q.dim(0)),
            "dequantize_fp8: an fp8 [N, C] tensor with a per-tensor or per-row f32 scale on its device needed, got {}",
            q.describe());
  return H3_OP_CALL(be, dequantize_fp8, q);
}

}  // namespace h3::ops

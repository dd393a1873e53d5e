// The front door of ops/gemm.h: shapes and dtypes checked once, then the entry of the backend holding x
// (ops/backend_ops.h).
#include "ops/gemm.h"

#include "ops/checks.h"

namespace h3::ops {

namespace {

Tensor linear_rounded(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const BackendOps& be = backend_of(x, "linear");
  H3_ASSERT(x.ndim() == 2 && w.ndim() == 2 && x.dim(1) == w.dim(1), "linear: x {} vs w {}", x.describe(), w.describe());
  if (bias) H3_ASSERT(bias->numel() == w.dim(0), "linear: bias {} for {} outputs", bias->describe(), w.dim(0));
  if (be.converts_params) {
    // The weight's dtype decides the arithmetic (bf16 layers in bf16, f32 layers in f32, fp8 with its scales); x
    // comes in any dtype the backend computes in and is converted (or quantized) to match.
    const bool x_ok = (be.float_types & dtype_bit(x.dtype())) || (be.fp8 && x.dtype() == DType::fp8_e4m3);
    H3_ASSERT(x_ok && x.device() == be.device, "linear: x must be a {} {} tensor{}, got {}",
              check::dtype_list(be.float_types), be.name, be.fp8 ? " (or fp8)" : "", x.describe());
    const bool w_ok = (be.float_types & dtype_bit(w.dtype())) || (be.fp8 && w.dtype() == DType::fp8_e4m3);
    H3_ASSERT(w_ok && w.device() == be.device, "linear: weights must be {} {} tensors{}, got {} on the {}",
              check::dtype_list(be.float_types), be.name, be.fp8 ? " (or fp8 with scales)" : "", w.describe(),
              w.on_device() ? "GPU" : "CPU");
    if (bias) check::param(be, x, *bias, "linear", "bias");
  } else {
    act(be, x, "linear", "x");
    same(x, w, "linear", "w");
    if (bias) same(x, *bias, "linear", "bias");
  }
  return H3_OP_CALL(be, linear, x, w, bias);
}

// Sums::kept: the backend's linear_acc entry.
Tensor linear_kept(const Tensor& x, const Tensor& w) {
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

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias, Sums sums) {
  if (sums == Sums::rounded) return linear_rounded(x, w, bias);
  H3_ASSERT(!bias, "linear: sums kept in the accumulator's dtype take no bias (add it after the fold)");
  return linear_kept(x, w);
}

PinnedGemms::PinnedGemms(Device device) : device_(device) {
  if (backend_present(device_)) {
    const BackendOps& be = backend_for(device_, "PinnedGemms");
    if (be.pin_gemms) be.pin_gemms(+1);
  }
}

PinnedGemms::~PinnedGemms() {
  if (backend_present(device_)) {
    const BackendOps& be = backend_for(device_, "PinnedGemms");
    if (be.pin_gemms) be.pin_gemms(-1);
  }
}

}  // namespace h3::ops

// The front door of ops/norm.h: shapes and dtypes checked once, then the entry of the backend holding x
// (ops/backend_ops.h). rms_norm's forms are separate entries of the backends' tables.
#include "ops/norm.h"

#include "ops/checks.h"

namespace h3::ops {

namespace {

void check_norm_to(const BackendOps& be, const Tensor& x, const Tensor* w, int64_t group, DType out, const char* op) {
  act(be, x, op, "x");
  const int64_t cols = x.ndim() ? x.dim(-1) : 1;
  H3_ASSERT(group > 0 && cols % group == 0, "{}: group {} does not divide {}", op, group, cols);
  if (w) {
    same(x, *w, op, "w");
    H3_ASSERT(w->numel() == group, "{}: weight {} for group {}", op, w->describe(), group);
  }
  H3_ASSERT(dtype_is_float(out) && out != DType::fp8_e4m3, "{}: output dtype {} is not a float type", op,
            dtype_name(out));
}

// NormRound::once in x's dtype: the backend's rms_norm entry.
Tensor rms_norm_once(const Tensor& x, const Tensor* w, int64_t group, double eps) {
  const BackendOps& be = backend_of(x, "rms_norm");
  act(be, x, "rms_norm", "x");
  const int64_t cols = check::row_width(x);
  H3_ASSERT(group > 0 && cols % group == 0, "rms_norm: group {} does not divide {}", group, cols);
  if (w) {
    same(x, *w, "rms_norm", "w");
    H3_ASSERT(w->numel() == group, "rms_norm: weight {} for group {}", w->describe(), group);
  }
  return H3_OP_CALL(be, rms_norm, x, w, group, eps);
}

// NormRound::once into another dtype: the backend's rms_norm_to entry.
Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  const BackendOps& be = backend_of(x, "rms_norm_to");
  check_norm_to(be, x, w, group, out, "rms_norm_to");
  return H3_OP_CALL(be, rms_norm_to, x, w, group, eps, out);
}

// NormRound::twice: the backend's rms_norm_rounded entry.
Tensor rms_norm_twice(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  const BackendOps& be = check::backend_of(x, "rms_norm_rounded");
  check::act(be, x, "rms_norm_rounded", "x");
  check::param(be, x, w, "rms_norm_rounded", "w");
  const int64_t cols = check::row_width(x);
  H3_ASSERT(group > 0 && cols % group == 0 && w.numel() == group,
            "rms_norm_rounded: group {} must divide the row of {} and match the weight {}", group, x.describe(),
            w.describe());
  return H3_OP_CALL(be, rms_norm_rounded, x, w, group, eps);
}

// NormRound::f32_in_f64*: the backend's rms_norm_via_f32 entry.
Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps, NormRound round) {
  const BackendOps& be = backend_of(x, "rms_norm_via_f32");
  H3_ASSERT(x.device() == Device::cpu && x.dtype() == DType::f64,
            "rms_norm_via_f32: x must be an f64 host tensor, got {}", x.describe());
  const int64_t cols = x.ndim() ? x.dim(-1) : 1;
  H3_ASSERT(group > 0 && cols % group == 0, "rms_norm_via_f32: group {} does not divide {}", group, cols);
  if (w)
    H3_ASSERT(w->device() == Device::cpu && w->dtype() == DType::f64 && w->numel() == group,
              "rms_norm_via_f32: weight {} for group {}", w->describe(), group);
  return H3_OP_CALL(be, rms_norm_via_f32, x, w, group, eps, round);
}

}  // namespace

Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps, NormRound round,
                std::optional<DType> out) {
  switch (round) {
    case NormRound::once:
      return out ? rms_norm_to(x, w, group, eps, *out) : rms_norm_once(x, w, group, eps);
    case NormRound::twice:
      H3_ASSERT(w && !out, "rms_norm: NormRound::twice needs a weight and gives x's dtype");
      return rms_norm_twice(x, *w, group, eps);
    case NormRound::f32_in_f64:
    case NormRound::f32_in_f64_weight_f64:
      H3_ASSERT(!out, "rms_norm: the f32-in-f64 forms give f64");
      return rms_norm_via_f32(x, w, group, eps, round);
  }
  fail("rms_norm: unknown rounding {}", static_cast<int>(round));
}

Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf16) {
  const BackendOps& be = backend_of(x, "norm_modulate");
  act(be, x, "norm_modulate", "x");
  same(x, {{w, "w"}, {shift, "shift"}, {scale, "scale"}}, "norm_modulate");
  check::tables(x, shift, scale, "norm_modulate");
  H3_ASSERT(w.numel() == x.dim(1), "norm_modulate: weight {} for {}", w.describe(), x.describe());
  check::index(be, idx, x.dim(0), shift.dim(0), "norm_modulate");
  return H3_OP_CALL(be, norm_modulate, x, w, eps, shift, scale, idx, bf16);
}

ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                    const Tensor& w, double eps, const Tensor& shift, const Tensor& scale, bool bf16,
                                    Fp8Out fp8) {
  const char* op = "residual_norm_modulate";
  const BackendOps& be = backend_of(x, op);
  act(be, x, op, "x");
  same(x, {{w, "w"}, {shift, "shift"}, {scale, "scale"}}, op);
  check::tables(x, shift, scale, op);
  H3_ASSERT(w.numel() == x.dim(1), "{}: weight {} for {}", op, w.describe(), x.describe());
  if (gate.defined()) {
    same(x, {{gate, "gate"}, {y, "y"}}, op);
    H3_ASSERT(y.shape() == x.shape() && gate.ndim() == 2 && gate.dim(1) == x.dim(1) && gate.dim(0) == shift.dim(0),
              "{}: x {} y {} gate {} tables {}", op, x.describe(), y.describe(), gate.describe(), shift.describe());
  }
  check::index(be, idx, x.dim(0), shift.dim(0), op);
  return H3_OP_CALL(be, residual_norm_modulate, x, gate, idx, y, w, eps, shift, scale, bf16, fp8);
}

std::pair<Tensor, Tensor> add_scaled_rms_norm(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                              int64_t group, double eps, DType out) {
  const BackendOps& be = backend_of(x, "add_scaled_rms_norm");
  check::add_scaled(be, x, y, scale, "add_scaled_rms_norm");
  check_norm_to(be, x, w, group, out, "add_scaled_rms_norm");
  return H3_OP_CALL(be, add_scaled_rms_norm, x, y, scale, w, group, eps, out);
}

Tensor layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps) {
  const BackendOps& be = backend_of(x, "layer_norm");
  act(be, x, "layer_norm", "x");
  const int64_t C = x.ndim() ? x.dim(-1) : 1;
  if (w) {
    param(be, x, *w, "layer_norm", "weight");
    H3_ASSERT(w->numel() == C, "layer_norm: weight {} for width {}", w->describe(), C);
  }
  if (b) {
    param(be, x, *b, "layer_norm", "bias");
    H3_ASSERT(b->numel() == C, "layer_norm: bias {} for width {}", b->describe(), C);
  }
  return H3_OP_CALL(be, layer_norm, x, w, b, eps);
}

Tensor group_norm_frames(const Tensor& x, int64_t groups, const Tensor* w, const Tensor* b, double eps) {
  const BackendOps& be = backend_of(x, "group_norm_frames");
  act(be, x, "group_norm_frames", "x");
  H3_ASSERT(x.ndim() >= 2, "group_norm_frames: x {}", x.describe());
  const int64_t C = x.dim(0);
  H3_ASSERT(groups > 0 && C % groups == 0, "group_norm_frames: {} groups for {} channels", groups, C);
  if (w) {
    same(x, *w, "group_norm_frames", "weight");
    H3_ASSERT(w->numel() == C, "group_norm_frames: weight {} for {} channels", w->describe(), C);
  }
  if (b) {
    same(x, *b, "group_norm_frames", "bias");
    H3_ASSERT(b->numel() == C, "group_norm_frames: bias {} for {} channels", b->describe(), C);
  }
  return H3_OP_CALL(be, group_norm_frames, x, groups, w, b, eps);
}

Tensor weight_norm(const Tensor& g, const Tensor& v) {
  const BackendOps& be = backend_of(v, "weight_norm");
  act(be, v, "weight_norm", "v");
  same(v, g, "weight_norm", "g");
  H3_ASSERT(v.ndim() >= 1 && g.numel() == v.dim(0), "weight_norm: g {} for v {}", g.describe(), v.describe());
  return H3_OP_CALL(be, weight_norm, g, v);
}

}  // namespace h3::ops

// The front door of ops.h: each op's shapes and dtypes checked once, then the entry of the backend holding its
// first tensor (ops/backend_ops.h).
#include "ops/ops.h"

#include "ops/checks.h"

namespace h3::ops {

using check::act;
using check::backend_of;
using check::same;

namespace {

void check_rows_2d(const Tensor& x, const char* op) {
  H3_ASSERT(x.ndim() == 2, "{}: a 2-D [rows, cols] input needed, got {}", op, x.describe());
}

// rope's table rules, shared with qk_norm_rope(_fp8): x [N, heads * d], cos/sin [N, R], R even, R <= d.
void check_rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t d, const char* op) {
  H3_ASSERT(d > 0 && x.ndim() == 2 && cos.ndim() == 2, "{}: head_dim {} with x {} cos {}", op, d, x.describe(),
            cos.describe());
  const int64_t r = cos.dim(1);
  H3_ASSERT(cos.dim(0) == x.dim(0) && sin.shape() == cos.shape() && r % 2 == 0 && r <= d && x.dim(1) % d == 0,
            "{}: x {} cos {} sin {} head_dim {}", op, x.describe(), cos.describe(), sin.describe(), d);
}

// modulate's table rules: shift/scale [R, C] for h [N, C].
void check_tables(const Tensor& h, const Tensor& shift, const Tensor& scale, const char* op) {
  H3_ASSERT(h.ndim() == 2 && shift.ndim() == 2 && scale.ndim() == 2, "{}: 2-D tensors needed, got {} {} {}", op,
            h.describe(), shift.describe(), scale.describe());
  H3_ASSERT(shift.dim(1) == h.dim(1) && scale.shape() == shift.shape(), "{}: tables {} {} for {}", op, shift.describe(),
            scale.describe(), h.describe());
}

void check_swiglu(const BackendOps& be, const Tensor& u, const char* op) {
  act(be, u, op, "u");
  H3_ASSERT(u.ndim() == 2 && u.dim(1) % 2 == 0, "{}: [N, 2F] input needed, got {}", op, u.describe());
}

// q [Nq, H*D], k/v [Nk, H*D]: the float path (q, k, v of one dtype) or, on an fp8 backend, fp8 q and k with
// per-tensor scales and v fp8 (scaled) or bf16.
void check_attention(const BackendOps& be, const Tensor& q, const Tensor& k, const Tensor& v, int64_t d,
                     const char* op) {
  if (q.dtype() == DType::fp8_e4m3) {
    check::fp8_per_tensor(be, q, op, "q");
    check::fp8_per_tensor(be, k, op, "k");
    if (v.dtype() == DType::bf16)
      H3_ASSERT(v.device() == q.device(), "{}: bf16 v {} must sit with q", op, v.describe());
    else
      check::fp8_per_tensor(be, v, op, "v");
  } else {
    act(be, q, op, "q");
    same(q, k, op, "k");
    same(q, v, op, "v");
  }
  H3_ASSERT(d > 0 && q.ndim() == 2 && k.ndim() == 2 && v.ndim() == 2, "{}: head_dim {} with q {} k {} v {}", op, d,
            q.describe(), k.describe(), v.describe());
  const int64_t cols = q.dim(1);
  H3_ASSERT(k.dim(1) == cols && v.shape() == k.shape() && cols % d == 0, "{}: q {} k {} v {} head_dim {}", op,
            q.describe(), k.describe(), v.describe(), d);
  H3_ASSERT(q.dim(0) == 0 || k.dim(0) > 0, "{}: {} queries but no keys", op, q.dim(0));
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
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

Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps) {
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

Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16) {
  const BackendOps& be = backend_of(h, "modulate");
  act(be, h, "modulate", "h");
  same(h, shift, "modulate", "shift");
  same(h, scale, "modulate", "scale");
  check_tables(h, shift, scale, "modulate");
  check::index(be, idx, h.dim(0), shift.dim(0), "modulate");
  return H3_OP_CALL(be, modulate, h, shift, scale, idx, bf16);
}

Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16) {
  const BackendOps& be = backend_of(x, "gate_residual");
  act(be, x, "gate_residual", "x");
  same(x, gate, "gate_residual", "gate");
  same(x, y, "gate_residual", "y");
  H3_ASSERT(x.ndim() == 2 && y.ndim() == 2 && gate.ndim() == 2, "gate_residual: 2-D tensors needed, got {} {} {}",
            x.describe(), y.describe(), gate.describe());
  H3_ASSERT(y.shape() == x.shape() && gate.dim(1) == x.dim(1), "gate_residual: x {} y {} gate {}", x.describe(),
            y.describe(), gate.describe());
  check::index(be, idx, x.dim(0), gate.dim(0), "gate_residual");
  return H3_OP_CALL(be, gate_residual, x, gate, idx, y, bf16);
}

Tensor add(const Tensor& x, const Tensor& y) {
  const BackendOps& be = backend_of(x, "add");
  act(be, x, "add", "x");
  same(x, y, "add", "y");
  H3_ASSERT(x.shape() == y.shape(), "add: {} vs {}", x.describe(), y.describe());
  return H3_OP_CALL(be, add, x, y);
}

Tensor silu(const Tensor& x) {
  const BackendOps& be = backend_of(x, "silu");
  act(be, x, "silu", "x");
  return H3_OP_CALL(be, silu, x);
}

Tensor swiglu(const Tensor& u, bool bf16) {
  const BackendOps& be = backend_of(u, "swiglu");
  check_swiglu(be, u, "swiglu");
  return H3_OP_CALL(be, swiglu, u, bf16);
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16) {
  const BackendOps& be = backend_of(x, "rope");
  act(be, x, "rope", "x");
  same(x, cos, "rope", "cos");
  same(x, sin, "rope", "sin");
  check_rope(x, cos, sin, head_dim, "rope");
  return H3_OP_CALL(be, rope, x, cos, sin, head_dim, bf16);
}

Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf16) {
  const BackendOps& be = backend_of(x, "norm_modulate");
  act(be, x, "norm_modulate", "x");
  same(x, w, "norm_modulate", "w");
  same(x, shift, "norm_modulate", "shift");
  same(x, scale, "norm_modulate", "scale");
  check_tables(x, shift, scale, "norm_modulate");
  H3_ASSERT(w.numel() == x.dim(1), "norm_modulate: weight {} for {}", w.describe(), x.describe());
  check::index(be, idx, x.dim(0), shift.dim(0), "norm_modulate");
  return H3_OP_CALL(be, norm_modulate, x, w, eps, shift, scale, idx, bf16);
}

Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                    const Tensor& sin, bool bf16) {
  const BackendOps& be = backend_of(x, "qk_norm_rope");
  act(be, x, "qk_norm_rope", "x");
  same(x, w, "qk_norm_rope", "w");
  same(x, cos, "qk_norm_rope", "cos");
  same(x, sin, "qk_norm_rope", "sin");
  check_rope(x, cos, sin, head_dim, "qk_norm_rope");
  H3_ASSERT(w.numel() == head_dim, "qk_norm_rope: weight {} for head_dim {}", w.describe(), head_dim);
  return H3_OP_CALL(be, qk_norm_rope, x, w, head_dim, eps, cos, sin, bf16);
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) {
  const BackendOps& be = backend_of(q, "attention");
  check_attention(be, q, k, v, head_dim, "attention");
  return H3_OP_CALL(be, attention, q, k, v, head_dim);
}

Tensor attention_fp8_out(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) {
  const BackendOps& be = backend_of(q, "attention_fp8_out");
  H3_ASSERT(q.dtype() == DType::fp8_e4m3, "attention_fp8_out: fp8 q/k/v needed, got {}", q.describe());
  check_attention(be, q, k, v, head_dim, "attention_fp8_out");
  return H3_OP_CALL(be, attention_fp8_out, q, k, v, head_dim);
}

void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx) {
  const BackendOps& be = backend_of(out, "scatter_rows");
  H3_ASSERT(out.ndim() >= 1 && rows.ndim() >= 1 && rows.dtype() == out.dtype() &&
                check::row_width(rows) == check::row_width(out),
            "scatter_rows: {} into {}", rows.describe(), out.describe());
  H3_ASSERT(rows.device() == out.device() || (be.converts_params && !rows.on_device()),
            "scatter_rows: rows {} on another device than out {}", rows.describe(), out.describe());
  check::index(be, idx, rows.dim(0), out.dim(0), "scatter_rows");
  H3_OP_CALL(be, scatter_rows, out, rows, idx);
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  const BackendOps& be = backend_of(x, "gather_rows");
  H3_ASSERT(x.ndim() >= 1, "gather_rows: needs at least 1-D, got {}", x.describe());
  check::index(be, idx, idx.numel(), x.dim(0), "gather_rows");
  return H3_OP_CALL(be, gather_rows, x, idx);
}

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const BackendOps& be = backend_of(t, "columns");
  H3_ASSERT(t.ndim() == 2 && 0 <= begin && begin <= end && end <= t.dim(1), "columns({}, {}) of {}", begin, end,
            t.describe());
  return H3_OP_CALL(be, columns, t, begin, end);
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  const BackendOps& be = backend_of(dst, "set_columns");
  H3_ASSERT(dst.ndim() == 2 && src.ndim() == 2 && dst.dim(0) == src.dim(0) && dst.dtype() == src.dtype() &&
                begin >= 0 && begin + src.dim(1) <= dst.dim(1),
            "set_columns({}) of {} into {}", begin, src.describe(), dst.describe());
  H3_ASSERT(src.device() == dst.device() || (be.converts_params && !src.on_device()),
            "set_columns: {} on another device than {}", src.describe(), dst.describe());
  H3_OP_CALL(be, set_columns, dst, begin, src);
}

Tensor quantize_fp8(const Tensor& w) {
  const BackendOps& be = backend_of(w, "quantize_fp8");
  act(be, w, "quantize_fp8", "w");
  return H3_OP_CALL(be, quantize_fp8, w);
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

ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                    const Tensor& w, double eps, const Tensor& shift, const Tensor& scale, bool bf16,
                                    Fp8Out fp8) {
  const char* op = "residual_norm_modulate";
  const BackendOps& be = backend_of(x, op);
  act(be, x, op, "x");
  same(x, w, op, "w");
  same(x, shift, op, "shift");
  same(x, scale, op, "scale");
  check_tables(x, shift, scale, op);
  H3_ASSERT(w.numel() == x.dim(1), "{}: weight {} for {}", op, w.describe(), x.describe());
  if (gate.defined()) {
    same(x, gate, op, "gate");
    same(x, y, op, "y");
    H3_ASSERT(y.shape() == x.shape() && gate.ndim() == 2 && gate.dim(1) == x.dim(1) && gate.dim(0) == shift.dim(0),
              "{}: x {} y {} gate {} tables {}", op, x.describe(), y.describe(), gate.describe(), shift.describe());
  }
  check::index(be, idx, x.dim(0), shift.dim(0), op);
  return H3_OP_CALL(be, residual_norm_modulate, x, gate, idx, y, w, eps, shift, scale, bf16, fp8);
}

Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                        const Tensor& sin, bool bf16, const Tensor& scale) {
  const char* op = "qk_norm_rope_fp8";
  const BackendOps& be = backend_of(x, op);
  act(be, x, op, "x");
  same(x, w, op, "w");
  same(x, cos, op, "cos");
  same(x, sin, op, "sin");
  check_rope(x, cos, sin, head_dim, op);
  H3_ASSERT(w.numel() == head_dim, "{}: weight {} for head_dim {}", op, w.describe(), head_dim);
  H3_ASSERT(scale.numel() == 1 && scale.dtype() == DType::f32, "{}: scale must be one f32, got {}", op,
            scale.describe());
  return H3_OP_CALL(be, qk_norm_rope_fp8, x, w, head_dim, eps, cos, sin, bf16, scale);
}

Tensor swiglu_fp8_rows(const Tensor& u, bool bf16) {
  const BackendOps& be = backend_of(u, "swiglu_fp8_rows");
  check_swiglu(be, u, "swiglu_fp8_rows");
  return H3_OP_CALL(be, swiglu_fp8_rows, u, bf16);
}

void round_bf16_(Tensor& x) {
  const BackendOps& be = backend_of(x, "round_bf16_");
  H3_ASSERT(!x.on_device(), "round_bf16_ emulates bf16 on the CPU; device tensors hold bf16 values already");
  if (x.dtype() != DType::f32) return;
  H3_OP_CALL(be, round_bf16_, x);
}

Tensor procedural(uint64_t base, double scale, double offset, const Shape& shape, Device device) {
  const BackendOps& be = backend_for(device, "procedural");
  for (int64_t d : shape) H3_ASSERT(d >= 0, "procedural: negative dimension in {}", shape_str(shape));
  return H3_OP_CALL(be, procedural, base, scale, offset, shape);
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

size_t device_total_bytes(Device device) {
  if (!backend_present(device)) return 0;
  const BackendOps& be = backend_for(device, "device_total_bytes");
  return be.total_bytes ? be.total_bytes() : 0;
}

int64_t device_budget_bytes(Device device) {
  if (!backend_present(device)) return 0;
  const BackendOps& be = backend_for(device, "device_budget_bytes");
  return be.budget_bytes ? be.budget_bytes() : 0;
}

int64_t device_in_use_bytes(Device device) {
  if (!backend_present(device)) return 0;
  const BackendOps& be = backend_for(device, "device_in_use_bytes");
  return be.in_use_bytes ? be.in_use_bytes() : 0;
}

}  // namespace h3::ops

#include "ops/checks.h"

#include <algorithm>

namespace h3::ops::check {

namespace {
bool in(uint32_t mask, DType t) {
  return (mask & dtype_bit(t)) != 0;
}
const char* where(const Tensor& t) {
  return t.on_device() ? "GPU" : "CPU";
}
}  // namespace

std::string dtype_list(uint32_t mask) {
  std::string s;
  for (DType t :
       {DType::f64, DType::f32, DType::bf16, DType::f16, DType::fp8_e4m3, DType::i64, DType::i32, DType::i8, DType::u8})
    if (in(mask, t)) s += (s.empty() ? "" : " or ") + std::string(dtype_name(t));
  return s;
}

void act(const BackendOps& be, const Tensor& t, const char* op, const char* what) {
  H3_ASSERT(t.device() == be.device && in(be.float_types, t.dtype()), "{}: {} must be a {} {} tensor, got {} on the {}",
            op, what, dtype_list(be.float_types), be.name, t.describe(), where(t));
}

void same(const Tensor& x, const Tensor& t, const char* op, const char* what) {
  H3_ASSERT(t.device() == x.device() && t.dtype() == x.dtype(), "{}: {} {} on the {} must match x {} on the {}", op,
            what, t.describe(), where(t), x.describe(), where(x));
}

void same(const Tensor& x, std::initializer_list<Named> ts, const char* op) {
  for (const Named& n : ts) same(x, n.t, op, n.what);
}

void param(const BackendOps& be, const Tensor& x, const Tensor& p, const char* op, const char* what) {
  if (be.converts_params) {
    H3_ASSERT(dtype_is_float(p.dtype()) && p.dtype() != DType::fp8_e4m3, "{}: {} must be a float tensor, got {}", op,
              what, p.describe());
    return;
  }
  same(x, p, op, what);
}

void index(const BackendOps& be, const Tensor& idx, int64_t n, int64_t rows, const char* op) {
  H3_ASSERT(in(be.index_types, idx.dtype()) && idx.numel() == n, "{}: index must be {}[{}], got {}", op,
            dtype_list(be.index_types), n, idx.describe());
  H3_ASSERT(idx.device() == be.device || (be.converts_params && !idx.on_device()),
            "{}: index {} on the {} for the {} backend", op, idx.describe(), where(idx), be.name);
  if (idx.on_device()) return;  // device indices are the backend's to trust (uploaded from checked host ones)
  auto check_all = [&]<typename I>(const I* p) {
    for (int64_t i = 0; i < n; ++i)
      H3_ASSERT(p[i] >= 0 && p[i] < rows, "{}: index {} at {} out of range [0, {})", op, static_cast<int64_t>(p[i]), i,
                rows);
  };
  if (idx.dtype() == DType::i32)
    check_all(idx.data<int32_t>());
  else
    check_all(idx.data<int64_t>());
}

void fp8_per_tensor(const BackendOps& be, const Tensor& t, const char* op, const char* what) {
  H3_ASSERT(be.fp8, "{}: {} is fp8 ({}), which the {} backend does not compute on", op, what, t.describe(), be.name);
  H3_ASSERT(t.device() == be.device && t.dtype() == DType::fp8_e4m3 && t.scale() && t.scale()->device() == t.device() &&
                t.scale()->dtype() == DType::f32 && t.scale()->numel() == 1,
            "{}: fp8 {} {} needs a per-tensor f32 scale on its device (ops::quantize_fp8 gives one)", op, what,
            t.describe());
}

int64_t row_width(const Tensor& t) {
  int64_t w = 1;
  for (int i = 1; i < t.ndim(); ++i) w *= t.dim(i);
  return w;
}

void tables(const Tensor& h, const Tensor& shift, const Tensor& scale, const char* op) {
  H3_ASSERT(h.ndim() == 2 && shift.ndim() == 2 && scale.ndim() == 2, "{}: 2-D tensors needed, got {} {} {}", op,
            h.describe(), shift.describe(), scale.describe());
  H3_ASSERT(shift.dim(1) == h.dim(1) && scale.shape() == shift.shape(), "{}: tables {} {} for {}", op, shift.describe(),
            scale.describe(), h.describe());
}

void add_scaled(const BackendOps& be, const Tensor& x, const Tensor& y, const Tensor& scale, const char* op) {
  act(be, x, op, "x");
  if (be.converts_params && x.dtype() == DType::f32 && y.dtype() == DType::bf16)
    H3_ASSERT(y.device() == x.device(), "{}: y {} must sit with x {}", op, y.describe(), x.describe());
  else
    same(x, y, op, "y");
  param(be, x, scale, op, "scale");
  H3_ASSERT(x.ndim() == 2 && y.shape() == x.shape() && scale.numel() == x.dim(1), "{}: x {} y {} scale {}", op,
            x.describe(), y.describe(), scale.describe());
}

}  // namespace h3::ops::check

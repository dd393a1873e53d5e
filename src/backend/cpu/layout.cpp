// Row/column reshuffles of 2-D host tensors (any dtype).
#include <algorithm>

#include "ops/ops.h"

#include "ops/device_ops.h"

namespace h3::ops {

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  H3_DEVICE_DISPATCH(t, columns, t, begin, end);
  H3_ASSERT(t.ndim() == 2 && 0 <= begin && begin <= end && end <= t.dim(1), "columns({}, {}) of {}", begin, end,
            t.describe());
  const int64_t n = t.dim(0), c = t.dim(1), w = end - begin;
  Tensor out(t.dtype(), {n, w});
  const size_t es = dtype_size(t.dtype());
  const auto* in = static_cast<const std::byte*>(t.raw());
  auto* o = static_cast<std::byte*>(out.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + (r * c + begin) * es, w * es, o + r * w * es);
  return out;
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  H3_DEVICE_DISPATCH(dst, set_columns, dst, begin, src);
  H3_ASSERT(dst.ndim() == 2 && src.ndim() == 2 && dst.dim(0) == src.dim(0) && dst.dtype() == src.dtype() &&
                begin >= 0 && begin + src.dim(1) <= dst.dim(1),
            "set_columns({}) of {} into {}", begin, src.describe(), dst.describe());
  const int64_t n = src.dim(0), c = dst.dim(1), w = src.dim(1);
  const size_t es = dtype_size(dst.dtype());
  const auto* in = static_cast<const std::byte*>(src.raw());
  auto* o = static_cast<std::byte*>(dst.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + r * w * es, w * es, o + (r * c + begin) * es);
}

}  // namespace h3::ops

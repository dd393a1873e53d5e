// Row/column reshuffles of 2-D host tensors (any dtype): entries of the CPU backend's table.
#include <algorithm>

#include "backend/cpu/ops.h"

namespace h3::cpu {

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t n = t.dim(0), c = t.dim(1), w = end - begin;
  Tensor out(t.dtype(), {n, w});
  const size_t es = dtype_size(t.dtype());
  const auto* in = static_cast<const std::byte*>(t.raw());
  auto* o = static_cast<std::byte*>(out.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + (r * c + begin) * es, w * es, o + r * w * es);
  return out;
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  const int64_t n = src.dim(0), c = dst.dim(1), w = src.dim(1);
  const size_t es = dtype_size(dst.dtype());
  const auto* in = static_cast<const std::byte*>(src.raw());
  auto* o = static_cast<std::byte*>(dst.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + r * w * es, w * es, o + (r * c + begin) * es);
}

}  // namespace h3::cpu

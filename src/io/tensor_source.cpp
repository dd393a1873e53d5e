#include "io/tensor_source.h"

#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace h3 {

Tensor gather_row_ranges(const Tensor& t, const std::vector<RowRange>& rows) {
  H3_ASSERT(t.ndim() >= 1, "gather_row_ranges: {} has no rows", t.describe());
  int64_t n = 0;
  for (const RowRange& r : rows) {
    H3_ASSERT(r.begin >= 0 && r.begin <= r.end && r.end <= t.dim(0), "gather_row_ranges: rows [{}, {}) of {}", r.begin,
              r.end, t.describe());
    n += r.size();
  }
  Shape s = t.shape();
  s[0] = n;
  Tensor out = Tensor::empty(t.dtype(), s, t.device());
  const size_t row = t.dim(0) > 0 ? t.nbytes() / static_cast<size_t>(t.dim(0)) : 0;
  size_t at = 0;
  for (const RowRange& r : rows) {
    const size_t bytes = static_cast<size_t>(r.size()) * row;
    if (bytes == 0) continue;
    auto* dst = static_cast<std::byte*>(out.raw()) + at;
    const auto* src = static_cast<const std::byte*>(t.raw()) + static_cast<size_t>(r.begin) * row;
    if (t.on_device())
      device_hooks().copy(dst, true, src, true, bytes);  // queued on the compute stream
    else
      std::memcpy(dst, src, bytes);
    at += bytes;
  }
  return out;
}

}  // namespace h3

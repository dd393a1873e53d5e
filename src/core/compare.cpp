#include "core/compare.h"

#include <cmath>
#include <cstring>

namespace h3 {

Diff compare(const Tensor& got, const Tensor& ref) {
  Diff d;
  if (got.numel() != ref.numel()) {
    d.shape_ok = false;
    d.rel_l2 = d.max_abs = INFINITY;
    return d;
  }
  d.bitwise = got.dtype() == ref.dtype() && std::memcmp(got.raw(), ref.raw(), got.nbytes()) == 0;
  long double num = 0, den = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    const double a = got.get(i), b = ref.get(i);
    const long double e = static_cast<long double>(a) - b;
    num += e * e;
    den += static_cast<long double>(b) * b;
    if (std::isnan(a) != std::isnan(b))
      d.max_abs = INFINITY;
    else
      d.max_abs = std::fmax(d.max_abs, std::fabs(a - b));
  }
  d.rel_l2 = den > 0 ? static_cast<double>(std::sqrt(num / den)) : (num > 0 ? INFINITY : 0.0);
  if (std::isnan(d.rel_l2)) d.rel_l2 = INFINITY;
  return d;
}

}  // namespace h3

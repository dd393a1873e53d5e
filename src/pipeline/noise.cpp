#include "pipeline/noise.h"

#include <cmath>

#include "core/rng.h"

namespace h3 {

Tensor seeded_normal(const Shape& shape, uint64_t seed, uint64_t stream) {
  Tensor t(DType::f32, shape);
  float* p = t.data<float>();
  const uint64_t base = splitmix64(seed ^ (stream * 0x9e3779b97f4a7c15ull));
  for (int64_t i = 0; i < t.numel(); ++i) {
    // Box-Muller on two uniforms in (0, 1].
    const double u1 = (static_cast<double>(splitmix64(base + 2 * i) >> 11) + 1.0) * 0x1p-53;
    const double u2 = static_cast<double>(splitmix64(base + 2 * i + 1) >> 11) * 0x1p-53;
    p[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
  }
  return t;
}

}  // namespace h3

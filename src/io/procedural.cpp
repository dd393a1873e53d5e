#include "io/procedural.h"

#include <cmath>

#include "core/parallel.h"
#include "ops/device_ops.h"

namespace h3 {

uint64_t fnv1a64(const std::string& s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ull;
  }
  return h;
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ProceduralRule procedural_rule(const std::string& name, const Shape& shape, uint64_t seed) {
  ProceduralRule r;
  r.base = seed ^ fnv1a64(name);
  if (shape.size() >= 2) {
    int64_t fan_in = 1;
    for (size_t i = 1; i < shape.size(); ++i) fan_in *= shape[i];
    r.scale = std::sqrt(3.0 / static_cast<double>(fan_in));
  } else if (name.find("norm") != std::string::npos) {
    r.scale = 0.1;
    r.offset = 1.0;
  }
  return r;
}

Tensor procedural_tensor(const std::string& name, const Shape& shape, uint64_t seed, Device device) {
  if (device == Device::cpu) return procedural_tensor(name, shape, seed);
  const ProceduralRule r = procedural_rule(name, shape, seed);
  return ops::device_ops("procedural").procedural(r.base, r.scale, r.offset, shape);
}

Tensor procedural_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  Tensor t(DType::f32, shape);
  float* out = t.data<float>();
  const ProceduralRule rule = procedural_rule(name, shape, seed);
  const uint64_t base = rule.base;
  const double scale = rule.scale, offset = rule.offset;
  parallel_for(t.numel(), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double u = static_cast<double>(splitmix64(base + static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * 2.0 - 1.0;
      out[i] = static_cast<float>(offset + u * scale);
    }
  }, 1 << 16);
  return t;
}

}  // namespace h3

// Procedural weights (formula in shared/golden/README.md): any tensor of any model can be regenerated from its
// name, shape and a seed, so tests and benchmarks need no checkpoint file.
//   u(name, i) = ((splitmix64((seed ^ fnv1a64(name)) + i) >> 11) * 2^-53) * 2 - 1, i row-major
//   ndim >= 2: u * sqrt(3 / prod(shape[1:]));  1-D with "norm" in the name: 1 + 0.1 u;  other 1-D: 0.05 u
// computed in f64 and rounded to f32.
#pragma once
#include <cstdint>
#include <string>

#include "core/tensor.h"

namespace h3 {

constexpr uint64_t kDefaultProceduralSeed = 20261129;

uint64_t fnv1a64(const std::string& s);
uint64_t splitmix64(uint64_t z);
// Fills an f32 tensor of `shape` for parameter `name`.
Tensor procedural_tensor(const std::string& name, const Shape& shape, uint64_t seed);
// The same values generated on `device` (bitwise equal to the host's).
Tensor procedural_tensor(const std::string& name, const Shape& shape, uint64_t seed, Device device);
// The formula's constants for one parameter: value i = float(offset + u(i) * scale), u from base + i.
struct ProceduralRule {
  uint64_t base = 0;
  double scale = 0.05, offset = 0.0;
};
ProceduralRule procedural_rule(const std::string& name, const Shape& shape, uint64_t seed);

}  // namespace h3

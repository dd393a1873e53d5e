// Procedural weights (formula in shared/golden/README.md): any tensor of any model can be regenerated from its
// name, shape and a seed, so tests and benchmarks need no checkpoint file.
//   u(name, i) = ((splitmix64((seed ^ fnv1a(name)) + i) >> 11) * 2^-53) * 2 - 1, i row-major (fnv1a: core/hash.h)
//   ndim >= 2: u * sqrt(3 / prod(shape[1:]));  1-D with "norm" in the name: 1 + 0.1 u;  other 1-D: 0.05 u
// computed in f64 and rounded to f32.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"

namespace h3 {

constexpr uint64_t kDefaultProceduralSeed = 20261129;
inline constexpr const char* kProceduralMini = "procedural:mini";
inline constexpr const char* kProceduralFull = "procedural:full";

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

// A tensor that is a fixed buffer of the model rather than a learned weight (a filter, say): the value to store, or
// nullopt to generate it procedurally.
using FixedTensorFn = std::function<std::optional<Tensor>(const std::string& name, const Shape& shape)>;
// A memory-mapped file holding procedural tensors for `params` (name = key) and `metadata`; the file is
// unlinked once mapped, so nothing is left on disk. `label` names it in logs.
std::shared_ptr<SafeTensors> procedural_safetensors(const std::vector<std::pair<std::string, Shape>>& params,
                                                    const std::map<std::string, std::string>& metadata, uint64_t seed,
                                                    const std::string& label, const FixedTensorFn& fixed = nullptr);

// Procedural weights as a TensorSource: `params` (name -> shape) generated on demand, on the host by get() and on the
// loader's device by load() (device tensors are bitwise the host's: no host copy, no file). `fixed` supplies
// fixed buffers (filters), computed on the host and copied.
class ProceduralWeights : public TensorSource {
 public:
  ProceduralWeights(std::vector<std::pair<std::string, Shape>> params, uint64_t seed, std::string label,
                    FixedTensorFn fixed = nullptr);
  const std::string& path() const override { return label_; }
  bool has(const std::string& key) const override { return shapes_.count(key) != 0; }
  Shape shape(const std::string& key) const override;
  DType dtype(const std::string& key) const override;
  Tensor get(const std::string& key) const override;
  Tensor load(DeviceLoader& loader, const std::string& key, DType dtype,
              const std::vector<RowRange>& rows = {}) const override;
  uint64_t seed() const { return seed_; }
  const std::vector<std::pair<std::string, Shape>>& params() const { return params_; }

 private:
  std::vector<std::pair<std::string, Shape>> params_;
  std::map<std::string, Shape> shapes_;
  uint64_t seed_;
  std::string label_;
  FixedTensorFn fixed_;
};

// A component's procedural spec "procedural:NAME[:seed=N]": the name (checked against `allowed`; `what` names the
// flag in the error) and the seed (the default seed when none is given).
struct ProceduralSpec {
  std::string name;
  uint64_t seed = kDefaultProceduralSeed;
};
ProceduralSpec parse_procedural_spec(const std::string& spec, const char* what,
                                     const std::vector<std::string>& allowed);
// "procedural:mini[:seed=N]": only mini allowed; returns the seed.
uint64_t procedural_mini_seed(const std::string& spec, const char* what);

}  // namespace h3

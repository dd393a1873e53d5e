#include "io/procedural.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/hash.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace h3 {

uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

ProceduralRule procedural_rule(const std::string& name, const Shape& shape, uint64_t seed) {
  ProceduralRule r;
  r.base = seed ^ fnv1a(name);
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
  return ops::procedural(r.base, r.scale, r.offset, shape, device);
}

Tensor procedural_tensor(const std::string& name, const Shape& shape, uint64_t seed) {
  Tensor t(DType::f32, shape);
  float* out = t.data<float>();
  const ProceduralRule rule = procedural_rule(name, shape, seed);
  const uint64_t base = rule.base;
  const double scale = rule.scale, offset = rule.offset;
  parallel_for(
      t.numel(),
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          double u = static_cast<double>(splitmix64(base + static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * 2.0 - 1.0;
          out[i] = static_cast<float>(offset + u * scale);
        }
      },
      1 << 16);
  return t;
}

namespace {
std::atomic<int> g_counter{0};
}  // namespace

std::shared_ptr<SafeTensors> procedural_safetensors(const std::vector<std::pair<std::string, Shape>>& params,
                                                    const std::map<std::string, std::string>& metadata, uint64_t seed,
                                                    const std::string& label, const FixedTensorFn& fixed) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(params.size());
  for (const auto& [name, shape] : params) {
    std::optional<Tensor> t = fixed ? fixed(name, shape) : std::nullopt;
    tensors.push_back({name, t ? std::move(*t) : procedural_tensor(name, shape, seed)});
  }
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  const fs::path path = dir / fmt::format("h3-{}-{}-{}.safetensors", label, ::getpid(), g_counter++);
  auto md = metadata;
  md["weights"] = fmt::format("procedural seed {}", seed);
  write_safetensors(path.string(), tensors, md);
  std::shared_ptr<SafeTensors> f;
  try {
    f = std::make_shared<SafeTensors>(SafeTensors::open(path.string()));
  } catch (...) {
    fs::remove(path, ec);
    throw;
  }
  // The mapping keeps the data alive; the name is not needed any more.
  fs::remove(path, ec);
  return f;
}

uint64_t procedural_mini_seed(const std::string& spec, const char* what) {
  const auto k = spec.find(":seed=");
  const std::string name = spec.substr(11, k == std::string::npos ? std::string::npos : k - 11);
  H3_CHECK(name == "mini", "{} '{}': only procedural:mini[:seed=N] exists for this component", what, spec);
  if (k == std::string::npos) return kDefaultProceduralSeed;
  try {
    return std::stoull(spec.substr(k + 6));
  } catch (const std::exception&) {
    fail("{}: the seed after ':seed=' is not a number", spec);
  }
}

}  // namespace h3

#include "io/procedural.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <cmath>
#include <filesystem>

#include "core/error.h"
#include "core/hash.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace h3 {

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

ProceduralWeights::ProceduralWeights(std::vector<std::pair<std::string, Shape>> params, uint64_t seed,
                                     std::string label, FixedTensorFn fixed)
    : params_(std::move(params)), seed_(seed), label_(std::move(label)), fixed_(std::move(fixed)) {
  for (const auto& [name, shape] : params_)
    if (!shapes_.emplace(name, shape).second) fail("{}: parameter '{}' listed twice", label_, name);
}

Shape ProceduralWeights::shape(const std::string& key) const {
  auto it = shapes_.find(key);
  if (it == shapes_.end()) fail("{}: no tensor '{}'", label_, key);
  return it->second;
}

DType ProceduralWeights::dtype(const std::string& key) const {
  (void)shape(key);
  return DType::f32;
}

Tensor ProceduralWeights::get(const std::string& key) const {
  const Shape s = shape(key);
  if (fixed_)
    if (std::optional<Tensor> t = fixed_(key, s)) return std::move(*t);
  return procedural_tensor(key, s, seed_);
}

Tensor ProceduralWeights::load(DeviceLoader& loader, const std::string& key, DType dtype,
                               const std::vector<RowRange>& rows) const {
  const Shape s = shape(key);
  std::optional<Tensor> t = fixed_ ? fixed_(key, s) : std::nullopt;
  Tensor v = t ? t->to_device(loader.device()) : procedural_tensor(key, s, seed_, loader.device());
  if (!rows.empty()) v = gather_row_ranges(v, rows);
  if (v.dtype() != dtype) {
    H3_CHECK(dtype != DType::fp8_e4m3, "{}: '{}' asked for in FP8; quantize after loading", label_, key);
    v = v.to(dtype);
  }
  loader.note_generated(v);
  return v;
}

ProceduralSpec parse_procedural_spec(const std::string& spec, const char* what,
                                     const std::vector<std::string>& allowed) {
  H3_CHECK(spec.starts_with("procedural:"), "{} '{}': not a procedural spec (procedural:NAME[:seed=N])", what, spec);
  const auto k = spec.find(":seed=");
  ProceduralSpec p;
  p.name = spec.substr(11, k == std::string::npos ? std::string::npos : k - 11);
  if (std::find(allowed.begin(), allowed.end(), p.name) == allowed.end()) {
    std::string names;
    for (const auto& a : allowed) names += (names.empty() ? "" : ", ") + ("procedural:" + a);
    fail("{} '{}': unknown procedural model '{}' for this component (known: {}, each with an optional :seed=N)", what,
         spec, p.name, names);
  }
  if (k == std::string::npos) return p;
  const std::string s = spec.substr(k + 6);
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), p.seed);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size())
    fail("{} '{}': the seed after ':seed=' is not a non-negative integer below 2^64", what, spec);
  return p;
}

uint64_t procedural_mini_seed(const std::string& spec, const char* what) {
  return parse_procedural_spec(spec, what, {"mini"}).seed;
}

}  // namespace h3

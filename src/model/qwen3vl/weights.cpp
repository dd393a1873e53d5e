#include "model/qwen3vl/weights.h"

#include <cstring>

#include "core/error.h"
#include "io/procedural.h"
#include "ops/ops.h"

namespace h3 {

DType qwen3vl_tower_dtype(Precision precision, Device device, const char* tower) {
  switch (precision) {
    case Precision::fp8:
      fail("Qwen3-VL {} tower: fp8 compute is not implemented; use bf16 (GPU) or f32", tower);
    case Precision::bf16:
      if (device != Device::cuda)
        fail("Qwen3-VL {} tower: bf16 runs on the GPU only (--device cuda); the CPU computes f32 or f64", tower);
      return DType::bf16;
    case Precision::f64:
      if (device != Device::cpu) fail("Qwen3-VL {} tower: f64 runs on the CPU only; on the GPU use bf16 or f32", tower);
      return DType::f64;
    default:
      return DType::f32;
  }
}

Qwen3VlTextWeights Qwen3VlTextWeights::from_file(std::shared_ptr<const SafeTensors> f) {
  H3_ASSERT(f != nullptr, "Qwen3VlTextWeights::from_file: no file");
  Qwen3VlTextWeights w;
  w.files_ = WeightFiles::of(std::move(f));
  w.path_ = w.files_->path();
  w.config_json_ = w.files_->config_json();
  return w;
}

Qwen3VlTextWeights Qwen3VlTextWeights::open(const std::string& path) {
  Qwen3VlTextWeights w;
  w.files_ = WeightFiles::open(path, "text encoder");
  w.path_ = path;
  w.config_json_ = w.files_->config_json();
  return w;
}

Qwen3VlTextWeights Qwen3VlTextWeights::procedural(const std::vector<std::pair<std::string, Shape>>& params,
                                                  std::string config_json, uint64_t seed, std::string label) {
  Qwen3VlTextWeights w;
  w.path_ = std::move(label);
  w.config_json_ = std::move(config_json);
  w.procedural_ = true;
  w.seed_ = seed;
  for (const auto& [name, shape] : params) {
    if (!w.procedural_infos_.emplace(name, TensorInfo{DType::f32, shape}).second)
      fail("{}: procedural parameter '{}' listed twice", w.path_, name);
    w.procedural_keys_.push_back(name);
  }
  return w;
}

bool Qwen3VlTextWeights::has(const std::string& key) const {
  return procedural_ ? procedural_infos_.count(key) != 0 : files_->has(key);
}

const std::vector<std::string>& Qwen3VlTextWeights::keys() const {
  return procedural_ ? procedural_keys_ : files_->keys();
}

const SafeTensors& Qwen3VlTextWeights::file_of(const std::string& key) const {
  if (procedural_) fail("{}: '{}' is generated, not stored in a file", path_, key);
  return files_->file_of(key);
}

const TensorInfo& Qwen3VlTextWeights::info(const std::string& key) const {
  if (procedural_) {
    const auto it = procedural_infos_.find(key);
    if (it == procedural_infos_.end()) fail("{}: no tensor '{}'", path_, key);
    return it->second;
  }
  return files_->info(key);
}

Tensor Qwen3VlTextWeights::get(const std::string& key) const {
  if (procedural_) return procedural_tensor(key, info(key).shape, seed_);
  return files_->get(key);
}

namespace {

// Columns [c0, c1) of a 2-D host tensor as a new host tensor of its dtype (bytes copied row by row).
Tensor host_columns(const Tensor& t, int64_t c0, int64_t c1) {
  const size_t es = dtype_size(t.dtype());
  Tensor out(t.dtype(), {t.dim(0), c1 - c0});
  const auto* src = static_cast<const std::byte*>(t.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  const size_t width = static_cast<size_t>(c1 - c0) * es, pitch = static_cast<size_t>(t.dim(1)) * es;
  for (int64_t r = 0; r < t.dim(0); ++r)
    std::memcpy(dst + static_cast<size_t>(r) * width, src + static_cast<size_t>(r) * pitch + c0 * es, width);
  return out;
}

// Procedural values of rows [r0, r0 + shape[0]) of a tensor whose rule is `rule` and whose rows hold `row_elems`
// values: element i of the block is element r0 * row_elems + i of the whole tensor (io/procedural.h's formula).
Tensor procedural_block(const ProceduralRule& rule, int64_t first, const Shape& shape, Device device) {
  const uint64_t base = rule.base + static_cast<uint64_t>(first);
  if (device != Device::cpu) return ops::procedural(base, rule.scale, rule.offset, shape, device);
  Tensor t(DType::f32, shape);
  float* out = t.data<float>();
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double u = static_cast<double>(splitmix64(base + static_cast<uint64_t>(i)) >> 11) * 0x1p-53 * 2.0 - 1.0;
    out[i] = static_cast<float>(rule.offset + u * rule.scale);
  }
  return t;
}

}  // namespace

Tensor Qwen3VlTextWeights::load(const std::string& key, DType dt, Device device, Slice rows, Slice cols,
                                DeviceLoader* loader) const {
  const Shape& shape = info(key).shape;
  auto check = [&](const Slice& s, int axis) {
    if (s.all()) return;
    if (static_cast<int>(shape.size()) <= axis || s.begin < 0 || s.end < s.begin || s.end > shape[axis])
      fail("{}: {} [{}, {}) of '{}' {} is out of range", path_, axis == 0 ? "rows" : "columns", s.begin, s.end, key,
           shape_str(shape));
  };
  if (!cols.all() && shape.size() != 2)
    fail("{}: columns of '{}' {}: only 2-D tensors have columns", path_, key, shape_str(shape));
  check(rows, 0);
  check(cols, 1);
  Tensor t;
  if (procedural_) {
    const ProceduralRule rule = procedural_rule(key, shape, seed_);
    int64_t row_elems = 1;
    for (size_t i = 1; i < shape.size(); ++i) row_elems *= shape[i];
    Shape block = shape;
    int64_t first = 0;
    if (!rows.all() && !shape.empty()) {
      block[0] = rows.end - rows.begin;
      first = rows.begin * row_elems;
    }
    t = procedural_block(rule, first, block, device);
    if (!cols.all())
      t = device == Device::cpu ? host_columns(t, cols.begin, cols.end) : ops::columns(t, cols.begin, cols.end);
    if (t.dtype() != dt) t = t.to(dt);
    if (loader) loader->note_generated(t);
    return t;
  }
  if (loader && device != Device::cpu) {
    if (loader->device() != device) fail("{}: '{}' asked on another device than its loader's", path_, key);
    const SafeTensors& f = file_of(key);
    if (rows.all() && cols.all()) return loader->load(read_tensor(f, key), dt);
    const std::vector<RowRange> rr = {rows.all() ? RowRange{0, shape[0]} : RowRange{rows.begin, rows.end}};
    return loader->load(read_rows(f, key, rr, cols.all() ? RowRange{} : RowRange{cols.begin, cols.end}), dt);
  }
  t = get(key);
  if (!rows.all()) t = t.rows(rows.begin, rows.end);
  if (!cols.all()) t = host_columns(t, cols.begin, cols.end);
  if (device == Device::cpu) return t.to(dt);  // a copy (also of a view of the mapped file)
  t = t.to_device(device);                     // the stored bytes of the block
  return t.dtype() == dt ? t : t.to(dt);
}

}  // namespace h3

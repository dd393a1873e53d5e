#include "model/qwen3vl/weights.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/json_limits.h"
#include "io/procedural.h"
#include "ops/ops.h"

namespace h3 {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p, const char* what) {
  return read_text_file_checked(p.string(), std::string("the ") + what);
}

}  // namespace

Qwen3VlTextWeights Qwen3VlTextWeights::from_file(std::shared_ptr<const SafeTensors> f) {
  H3_ASSERT(f != nullptr, "Qwen3VlTextWeights::from_file: no file");
  Qwen3VlTextWeights w;
  w.path_ = f->path();
  w.shard_paths_ = {f->path()};
  w.shards_ = {f};
  w.keys_ = f->keys();
  for (const auto& k : w.keys_) w.where_[k] = 0;
  w.config_json_ = f->meta("config");
  return w;
}

Qwen3VlTextWeights Qwen3VlTextWeights::open(const std::string& path) {
  if (!fs::exists(path))
    fail(
        "text encoder {} does not exist: pass a .safetensors file or a transformers folder (config.json + "
        "model.safetensors.index.json + shards)",
        path);
  if (!fs::is_directory(path)) return from_file(std::make_shared<SafeTensors>(SafeTensors::open(path)));

  const fs::path dir(path);
  std::string config;
  if (fs::exists(dir / "config.json")) config = read_text(dir / "config.json", "text encoder config");
  fs::path index;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".safetensors.index.json")) {
      if (!index.empty()) fail("{}: two shard indexes ({} and {}); keep one", path, index.filename().string(), name);
      index = e.path();
    } else if (e.path().extension() == ".safetensors") {
      files.push_back(e.path());
    }
  }

  if (index.empty()) {
    if (files.size() != 1)
      fail(
          "{}: {} .safetensors files and no model.safetensors.index.json saying which key lives where; add "
          "the index or pass one file",
          path, files.size());
    Qwen3VlTextWeights w = from_file(std::make_shared<SafeTensors>(SafeTensors::open(files[0].string())));
    w.path_ = path;
    if (!config.empty()) w.config_json_ = config;
    return w;
  }

  Qwen3VlTextWeights w;
  w.path_ = path;
  w.index_path_ = index.string();
  nlohmann::json j;
  try {
    j = parse_json_bounded(read_text(index, "shard index"), index.string() + ": the shard index");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the shard index is not valid JSON ({})", w.index_path_, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: the shard index has no \"weight_map\" object (key -> shard file)", w.index_path_);
  std::map<std::string, int> shard_ids;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail("{}: weight_map entry '{}' is not a shard file name", w.index_path_, it.key());
    const std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos)
      fail("{}: weight_map entry '{}' names '{}', which is not a file of this folder", w.index_path_, it.key(), shard);
    auto [pos, fresh] = shard_ids.emplace(shard, static_cast<int>(w.shard_paths_.size()));
    if (fresh) w.shard_paths_.push_back((dir / shard).string());
    w.where_[it.key()] = pos->second;
    w.keys_.push_back(it.key());
  }
  if (w.keys_.empty()) fail("{}: the shard index lists no tensors", w.index_path_);
  w.shards_.resize(w.shard_paths_.size());
  w.config_json_ = config;
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
    w.keys_.push_back(name);
    w.where_[name] = 0;
  }
  return w;
}

const SafeTensors& Qwen3VlTextWeights::shard_of(const std::string& key) const {
  const auto it = where_.find(key);
  if (it == where_.end()) fail("{}: no tensor '{}'", path_, key);
  auto& slot = shards_[static_cast<size_t>(it->second)];
  if (!slot) {
    const std::string& shard = shard_paths_[static_cast<size_t>(it->second)];
    if (!fs::exists(shard))
      fail("{}: shard {} is missing (the index {} puts '{}' there); download the whole folder", path_, shard,
           index_path_, key);
    slot = std::make_shared<SafeTensors>(SafeTensors::open(shard));
  }
  if (!slot->has(key))
    fail("{}: the index {} puts '{}' in {}, but that shard has no such tensor (index and shards disagree)", path_,
         index_path_, key, slot->path());
  return *slot;
}

const TensorInfo& Qwen3VlTextWeights::info(const std::string& key) const {
  if (procedural_) {
    const auto it = procedural_infos_.find(key);
    if (it == procedural_infos_.end()) fail("{}: no tensor '{}'", path_, key);
    return it->second;
  }
  return shard_of(key).info(key);
}

Tensor Qwen3VlTextWeights::get(const std::string& key) const {
  if (procedural_) return procedural_tensor(key, info(key).shape, seed_);
  return shard_of(key).get(key);
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
    const SafeTensors& f = shard_of(key);
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

size_t Qwen3VlTextWeights::shards_opened() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s != nullptr;
  return n;
}

}  // namespace h3

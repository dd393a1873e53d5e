#include "model/qwen3vl/weights.h"

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.h"
#include "core/files.h"
#include "core/json_limits.h"

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
  return shard_of(key).info(key);
}

Tensor Qwen3VlTextWeights::get(const std::string& key) const {
  return shard_of(key).get(key);
}

size_t Qwen3VlTextWeights::shards_opened() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s != nullptr;
  return n;
}

}  // namespace h3

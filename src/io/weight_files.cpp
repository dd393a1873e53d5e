#include "io/weight_files.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/json_limits.h"

namespace h3 {

namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p, const std::string& what) {
  return read_text_file_checked(p.string(), "the " + what);
}

}  // namespace

std::shared_ptr<WeightFiles> WeightFiles::of(std::shared_ptr<const SafeTensors> f) {
  H3_ASSERT(f != nullptr, "WeightFiles::of: no file");
  auto w = std::make_shared<WeightFiles>();
  w->path_ = f->path();
  w->shard_paths_ = {f->path()};
  w->shards_ = {f};
  w->keys_ = f->keys();
  for (const auto& k : w->keys_) w->where_[k] = 0;
  w->config_json_ = f->meta("config");
  return w;
}

std::shared_ptr<WeightFiles> WeightFiles::of(const SafeTensors& f) {
  return of(std::make_shared<const SafeTensors>(f));
}

std::shared_ptr<WeightFiles> WeightFiles::open(const std::string& path, const std::string& what) {
  if (!fs::exists(path))
    fail(
        "{} {} does not exist: pass a .safetensors file or a checkpoint folder (config.json with "
        "*.safetensors.index.json and its shards, or .safetensors files)",
        what, path);
  if (!fs::is_directory(path)) return of(std::make_shared<SafeTensors>(SafeTensors::open(path)));

  const fs::path dir(path);
  std::string config;
  if (fs::exists(dir / "config.json")) config = read_text(dir / "config.json", what + " config");
  fs::path index;
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir)) {
    const std::string name = e.path().filename().string();
    if (name.ends_with(".safetensors.index.json")) {
      if (!index.empty())
        fail("{} {}: two shard indexes ({} and {}); keep one", what, path, index.filename().string(), name);
      index = e.path();
    } else if (e.path().extension() == ".safetensors") {
      files.push_back(e.path());
    }
  }

  if (index.empty()) {
    if (files.empty())
      fail("{} {}: the folder holds no .safetensors files (expected the {} checkpoint folder)", what, path, what);
    std::sort(files.begin(), files.end());
    auto w = std::make_shared<WeightFiles>();
    w->path_ = path;
    for (const auto& f : files) {
      auto st = std::make_shared<const SafeTensors>(SafeTensors::open(f.string()));
      const int id = static_cast<int>(w->shards_.size());
      for (const auto& k : st->keys()) {
        auto [it, fresh] = w->where_.emplace(k, id);
        if (!fresh)
          fail("{} {}: tensor '{}' is in both {} and {}; a folder without an index must not repeat keys", what, path, k,
               w->shard_paths_[static_cast<size_t>(it->second)], f.string());
        w->keys_.push_back(k);
      }
      w->shard_paths_.push_back(f.string());
      w->shards_.push_back(std::move(st));
    }
    w->config_json_ = !config.empty() ? config : w->shards_.size() == 1 ? w->shards_[0]->meta("config") : "";
    return w;
  }

  auto w = std::make_shared<WeightFiles>();
  w->path_ = path;
  w->index_path_ = index.string();
  nlohmann::json j;
  try {
    j = parse_json_bounded(read_text(index, what + " shard index"), index.string() + ": the shard index");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: the shard index is not valid JSON ({})", w->index_path_, e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    fail("{}: the shard index has no \"weight_map\" object (key -> shard file)", w->index_path_);
  std::map<std::string, int> shard_ids;
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string()) fail("{}: weight_map entry '{}' is not a shard file name", w->index_path_, it.key());
    const std::string shard = it.value().get<std::string>();
    if (shard.empty() || shard.find('/') != std::string::npos || shard.find('\\') != std::string::npos ||
        shard == "." || shard == "..")
      fail("{}: weight_map entry '{}' names '{}', which is not a file of this folder", w->index_path_, it.key(), shard);
    auto [pos, fresh] = shard_ids.emplace(shard, static_cast<int>(w->shard_paths_.size()));
    if (fresh) w->shard_paths_.push_back((dir / shard).string());
    w->where_[it.key()] = pos->second;
    w->keys_.push_back(it.key());
  }
  if (w->keys_.empty()) fail("{}: the shard index lists no tensors", w->index_path_);
  w->shards_.resize(w->shard_paths_.size());
  w->config_json_ = config;
  return w;
}

const SafeTensors& WeightFiles::file_of(const std::string& key) const {
  const auto it = where_.find(key);
  if (it == where_.end()) fail("{}: no tensor '{}'", path_, key);
  auto& slot = shards_[static_cast<size_t>(it->second)];
  if (!slot) {
    const std::string& shard = shard_paths_[static_cast<size_t>(it->second)];
    if (!fs::exists(shard))
      fail("{}: shard {} is missing (the index {} puts '{}' there); download the whole folder", path_, shard,
           index_path_, key);
    slot = std::make_shared<const SafeTensors>(SafeTensors::open(shard));
  }
  if (!slot->has(key))
    fail("{}: the index {} puts '{}' in {}, but that shard has no such tensor (index and shards disagree)", path_,
         index_path_, key, slot->path());
  return *slot;
}

const TensorInfo& WeightFiles::info(const std::string& key) const {
  return file_of(key).info(key);
}

Tensor WeightFiles::get(const std::string& key) const {
  return file_of(key).get(key);
}

Tensor WeightFiles::load(DeviceLoader& loader, const std::string& key, DType dtype,
                         const std::vector<RowRange>& rows) const {
  const SafeTensors& f = file_of(key);
  return loader.load(rows.empty() ? read_tensor(f, key) : read_rows(f, key, rows), dtype);
}

std::string WeightFiles::meta(const std::string& name) const {
  if (shards_.empty()) return "";
  if (!shards_[0]) {
    for (const auto& [k, id] : where_)
      if (id == 0) return file_of(k).meta(name);
    return "";
  }
  return shards_[0]->meta(name);
}

size_t WeightFiles::shards_opened() const {
  size_t n = 0;
  for (const auto& s : shards_) n += s != nullptr;
  return n;
}

void write_sharded_safetensors(const std::string& dir, const std::string& stem,
                               const std::vector<std::pair<std::string, Tensor>>& tensors, size_t shard_bytes,
                               const std::map<std::string, std::string>& metadata) {
  std::vector<std::vector<std::pair<std::string, Tensor>>> shards(1);
  size_t in_shard = 0, total = 0;
  for (const auto& [name, t] : tensors) {
    if (in_shard > 0 && in_shard + t.nbytes() > shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().emplace_back(name, t);
    in_shard += t.nbytes();
    total += t.nbytes();
  }
  fs::create_directories(dir);
  nlohmann::json index = {{"metadata", {{"total_size", total}}}, {"weight_map", nlohmann::json::object()}};
  const size_t n = shards.size();
  for (size_t i = 0; i < n; ++i) {
    const std::string name = fmt::format("{}-{:05d}-of-{:05d}.safetensors", stem, i + 1, n);
    write_safetensors((fs::path(dir) / name).string(), shards[i], metadata);
    for (const auto& [key, t] : shards[i]) index["weight_map"][key] = name;
  }
  const fs::path ip = fs::path(dir) / (stem + ".safetensors.index.json");
  check_output_file(ip.string(), "shard index");
  std::ofstream out(ip);
  out << index.dump(2) << "\n";
  if (!out.good()) fail("{}: cannot write the shard index (disk full?)", ip.string());
}

}  // namespace h3

// Where the Qwen3-VL text decoder's tensors come from: one safetensors file (golden sets, procedural weights,
// ComfyUI's truncated text encoder) or a transformers folder (config.json with "text_config",
// model.safetensors.index.json and its shards; the released Qwen3-VL layout). Only headers are read when the
// source opens; a shard is mapped the first time one of its keys is asked for, so shards holding only the
// vision tower or lm_head are never touched, and tensor data is read only for the keys the model loads
// (embeddings, the decoder layers it runs, the final norm).
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace h3 {

class Qwen3VlTextWeights {
 public:
  // A file already open (shares its mapping).
  static Qwen3VlTextWeights from_file(std::shared_ptr<const SafeTensors> f);
  // A .safetensors file, or a folder: with model.safetensors.index.json its shards (a shard the index names
  // must exist when one of its keys is read; the error names shard, key and index), else exactly one
  // .safetensors file. config.json (flat or with "text_config") supplies the config when present.
  static Qwen3VlTextWeights open(const std::string& path);

  const std::string& path() const { return path_; }
  bool has(const std::string& key) const { return where_.count(key) != 0; }
  const TensorInfo& info(const std::string& key) const;
  // A zero-copy view of the stored tensor (its stored dtype).
  Tensor get(const std::string& key) const;
  // Every key, in index (or file) order.
  const std::vector<std::string>& keys() const { return keys_; }
  // config.json's text, else the file's "config" metadata, else "".
  const std::string& config_json() const { return config_json_; }
  // Shards named by the index (one entry for a single file) and how many were mapped so far.
  size_t shard_count() const { return shard_paths_.size(); }
  size_t shards_opened() const;

 private:
  const SafeTensors& shard_of(const std::string& key) const;
  std::string path_, index_path_;
  std::vector<std::string> shard_paths_;
  mutable std::vector<std::shared_ptr<const SafeTensors>> shards_;  // mapped on first use
  std::map<std::string, int> where_;                                // key -> shard
  std::vector<std::string> keys_;
  std::string config_json_;
};

}  // namespace h3

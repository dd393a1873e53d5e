// A checkpoint as released: one .safetensors file, or a folder holding a "*.safetensors.index.json" (its
// "weight_map": key -> shard file of the same folder) and the shards, or a folder of .safetensors files without an
// index (their keys must not repeat). Only headers are read when it opens, and with an index a shard is mapped the
// first time one of its keys is asked for, so shards the model never reads (another tower, lm_head) are never
// touched; a shard the index names must exist when one of its keys is read (the error names shard, key and index).
// A folder's config.json is its config; a single file's "config" metadata otherwise.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "io/tensor_source.h"

namespace h3 {

class WeightFiles : public TensorSource {
 public:
  // `what` names the component in errors ("video VAE").
  static std::shared_ptr<WeightFiles> open(const std::string& path, const std::string& what);
  // A file already open (shares its mapping).
  static std::shared_ptr<WeightFiles> of(std::shared_ptr<const SafeTensors> f);
  static std::shared_ptr<WeightFiles> of(const SafeTensors& f);

  const std::string& path() const override { return path_; }
  bool has(const std::string& key) const override { return where_.count(key) != 0; }
  Shape shape(const std::string& key) const override { return info(key).shape; }
  DType dtype(const std::string& key) const override { return info(key).dtype; }
  Tensor get(const std::string& key) const override;
  Tensor load(DeviceLoader& loader, const std::string& key, DType dtype,
              const std::vector<RowRange>& rows = {}) const override;
  std::string config_json() const override { return config_json_; }
  // Metadata of the first file (a single file's own; a sharded folder's first shard, mapped for it).
  std::string meta(const std::string& name) const override;

  const TensorInfo& info(const std::string& key) const;
  // The mapped file holding `key` (mapped now if it was not yet).
  const SafeTensors& file_of(const std::string& key) const;
  // Every key, in index (or file) order.
  const std::vector<std::string>& keys() const { return keys_; }
  // The shard index ("" without one), the shard files, and how many are mapped so far.
  const std::string& index_path() const { return index_path_; }
  const std::vector<std::string>& shard_paths() const { return shard_paths_; }
  size_t shards_opened() const;

 private:
  std::string path_, index_path_, config_json_;
  std::vector<std::string> shard_paths_;
  mutable std::vector<std::shared_ptr<const SafeTensors>> shards_;  // mapped on first use
  std::map<std::string, int> where_;                                // key -> shard
  std::vector<std::string> keys_;
};

// Writes `tensors` as a sharded checkpoint in folder `dir`: shards "<stem>-0000k-of-0000n.safetensors" of about
// `shard_bytes` each (a tensor is never split), and "<stem>.safetensors.index.json" with the weight_map and
// metadata.total_size, as transformers and diffusers write them; `metadata` goes into every shard.
void write_sharded_safetensors(const std::string& dir, const std::string& stem,
                               const std::vector<std::pair<std::string, Tensor>>& tensors, size_t shard_bytes,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace h3

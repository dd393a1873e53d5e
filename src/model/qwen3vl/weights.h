// Where the Qwen3-VL text decoder's tensors come from: one safetensors file (golden sets, procedural weights,
// ComfyUI's truncated text encoder) or a transformers folder (config.json with "text_config",
// model.safetensors.index.json and its shards; the released Qwen3-VL layout), opened as io/weight_files.h does
// for every component. Only headers are read when the source opens; a shard is mapped the first time one of its
// keys is asked for, so shards holding only the vision tower or lm_head are never touched, and tensor data is read
// only for the keys the model loads (embeddings, the decoder layers it runs, the final norm). A procedural source
// (procedural(), the formula of shared/golden/README.md) has keys and shapes but no file: its tensors are generated
// where they are loaded.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/device_loader.h"
#include "io/safetensors.h"
#include "io/weight_files.h"

namespace h3 {

// The dtype a tower ("text", "vision") computes in for `precision` on `device`: bf16 on the GPU only, f64 on the CPU
// only, f32 on either; fp8 is refused (messages name the tower).
DType qwen3vl_tower_dtype(Precision precision, Device device, const char* tower);

// Rows or columns [begin, end) of a stored tensor; end < 0 means all of them.
struct Slice {
  int64_t begin = 0, end = -1;
  bool all() const { return end < 0; }
};

class Qwen3VlTextWeights {
 public:
  // A file already open (shares its mapping).
  static Qwen3VlTextWeights from_file(std::shared_ptr<const SafeTensors> f);
  // A .safetensors file, or a folder: with model.safetensors.index.json its shards (a shard the index names
  // must exist when one of its keys is read; the error names shard, key and index), else its .safetensors files
  // (no key in two of them). config.json (flat or with "text_config") supplies the config when present.
  static Qwen3VlTextWeights open(const std::string& path);
  // Procedural weights for `params` (key = the formula's name, f32 values): nothing is generated until a tensor is
  // loaded. `label` is what path() reports.
  static Qwen3VlTextWeights procedural(const std::vector<std::pair<std::string, Shape>>& params,
                                       std::string config_json, uint64_t seed, std::string label);

  const std::string& path() const { return path_; }
  bool has(const std::string& key) const;
  const TensorInfo& info(const std::string& key) const;
  // A zero-copy view of the stored tensor (its stored dtype); procedural sources generate it on the host in f32.
  Tensor get(const std::string& key) const;
  // Rows `rows` and then columns `cols` (2-D tensors) of the tensor, in dtype `dt` on `device`, reading only that
  // block: on the GPU the stored bytes of the block go over and are converted there, so the host never holds a
  // converted copy; a procedural block is generated on the target itself. Throws when the slices are out of range.
  // With `loader` (its device must be `device`, a GPU), a file's block is read through its pinned staging buffers
  // (reads and copies overlapped, io/device_loader.h) and counted in its report, as is a generated block.
  Tensor load(const std::string& key, DType dt, Device device, Slice rows = {}, Slice cols = {},
              DeviceLoader* loader = nullptr) const;
  bool procedural() const { return procedural_; }
  // Every key, in index (or file) order.
  const std::vector<std::string>& keys() const;
  // config.json's text, else the file's "config" metadata, else "".
  const std::string& config_json() const { return config_json_; }
  // The mapped shard holding `key` (mapped now if it was not yet): for staged reads to the device,
  // DeviceLoader::load(read_rows(file_of(key), key, rows), dtype) (io/device_loader.h).
  const SafeTensors& file_of(const std::string& key) const;
  // Keeps the files open and mapped while the result lives (file_of's references stay valid): for readers that
  // outlive this object (a tower streaming from its checkpoint). Null for procedural sources.
  std::shared_ptr<const void> keep_files() const { return files_; }
  // Shards named by the index (one entry for a single file) and how many were mapped so far.
  size_t shard_count() const { return files_ ? files_->shard_paths().size() : 0; }
  size_t shards_opened() const { return files_ ? files_->shards_opened() : 0; }

 private:
  std::string path_;
  std::shared_ptr<const WeightFiles> files_;  // file sources
  std::string config_json_;
  std::vector<std::string> procedural_keys_;
  std::map<std::string, TensorInfo> procedural_infos_;  // procedural sources: key -> (f32, shape)
  bool procedural_ = false;
  uint64_t seed_ = 0;
};

}  // namespace h3

// safetensors files: a little-endian u64 header length, a JSON header {key: {dtype, shape, data_offsets}} with an
// optional "__metadata__" string map, then the raw data. The reader memory-maps the file, validates the whole
// header before any tensor is touched, and hands out zero-copy views. Every error names the file and the key.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/mmap.h"
#include "core/tensor.h"

namespace h3 {

struct TensorInfo {
  DType dtype;
  Shape shape;
  size_t begin = 0;  // offsets relative to the start of the data region
  size_t end = 0;
};

class SafeTensors {
 public:
  // Opens and validates; throws h3::Error naming the file (and key) on any inconsistency.
  static SafeTensors open(const std::string& path);

  const std::string& path() const { return path_; }
  const std::vector<std::string>& keys() const { return keys_; }  // in file order of data offsets
  bool has(const std::string& key) const { return infos_.count(key) != 0; }
  const TensorInfo& info(const std::string& key) const;
  // A zero-copy view (copied only if the data is misaligned for its dtype).
  Tensor get(const std::string& key) const;
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Metadata value or "" when absent.
  std::string meta(const std::string& key) const;
  size_t data_bytes() const { return data_size_; }

 private:
  std::string path_;
  std::shared_ptr<MappedFile> file_;
  const std::byte* data_ = nullptr;
  size_t data_size_ = 0;
  std::vector<std::string> keys_;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
};

// Parses and validates a header given the raw file bytes (exposed for fuzzing); `path` only names errors.
void safetensors_parse(const std::string& path, const std::byte* bytes, size_t size,
                       std::map<std::string, TensorInfo>& infos, std::vector<std::string>& keys,
                       std::map<std::string, std::string>& metadata, size_t& data_offset);

// Writes tensors (host memory) with metadata. Writes to "<path>.partial" and renames, so a failure never leaves
// a truncated file under the final name.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace h3

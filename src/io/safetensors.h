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
  // Bytes [offset, offset + bytes) of tensor `key`'s data read into dst with pread, not through the mapping (the
  // staged device loads, io/device_loader.h); throws naming the file and key.
  void read(const std::string& key, size_t offset, void* dst, size_t bytes) const;

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

// One tensor of a file to write: the header needs every name, dtype and shape before the first byte of data.
struct SafeTensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
};

// A safetensors file written as a stream, for files larger than memory (h3 convert at full size): the header first,
// then each entry's data in order, handed over one tensor at a time. A background thread writes while the caller
// makes the next tensor; at most `max_queued_bytes` wait in its queue (write() blocks beyond). Like
// write_safetensors (the same bytes for the same tensors), it writes "<path>.partial" and renames it in finish();
// destroyed without finish(), or after a failure, it removes the partial file.
class SafeTensorsWriter {
 public:
  SafeTensorsWriter(const std::string& path, const std::vector<SafeTensorsEntry>& entries,
                    const std::map<std::string, std::string>& metadata = {}, size_t max_queued_bytes = size_t{2} << 30);
  ~SafeTensorsWriter();
  SafeTensorsWriter(const SafeTensorsWriter&) = delete;
  SafeTensorsWriter& operator=(const SafeTensorsWriter&) = delete;
  // The next entry's data: a host tensor of the entry's name, dtype and shape (checked; a mismatch throws).
  void write(const std::string& name, Tensor t);
  // Waits for the queue, closes the file and moves it into place; throws naming the file if any write failed.
  void finish();
  // Bytes of the whole file (header included).
  size_t file_bytes() const { return file_bytes_; }

 private:
  struct State;
  std::unique_ptr<State> st_;
  std::string path_;
  std::vector<SafeTensorsEntry> entries_;
  size_t next_ = 0;
  size_t file_bytes_ = 0;
  bool finished_ = false;
};

}  // namespace h3

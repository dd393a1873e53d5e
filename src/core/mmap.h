// Read-only memory mapping of a whole file. The descriptor stays open with the mapping, so the file can also be read
// with pread (io/device_loader.h stages large reads that way) even after its name is unlinked.
#pragma once
#include <cstddef>
#include <memory>
#include <string>

namespace h3 {

class MappedFile {
 public:
  // Throws h3::Error naming the path if it cannot be opened or mapped.
  static std::shared_ptr<MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads bytes [offset, offset + bytes) of the file into dst (pread, retried until complete); throws naming the
  // file when the read fails or the file is shorter than that.
  void read_at(size_t offset, void* dst, size_t bytes) const;

 private:
  MappedFile() = default;
  std::string path_;
  const std::byte* data_ = nullptr;
  size_t size_ = 0;
  int fd_ = -1;
};

}  // namespace h3

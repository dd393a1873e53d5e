#include "core/mmap.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.h"

namespace h3 {

std::shared_ptr<MappedFile> MappedFile::open(const std::string& path) {
  // O_NONBLOCK: a FIFO given as a checkpoint must be refused now, not wait for a writer in open().
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{}: cannot open: {}", path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    fail("{}: not a regular file ({}); give a file", path,
         S_ISDIR(st.st_mode)    ? "a folder"
         : S_ISFIFO(st.st_mode) ? "a FIFO"
                                : "a device or socket");
  }
  auto f = std::shared_ptr<MappedFile>(new MappedFile());
  f->path_ = path;
  f->size_ = static_cast<size_t>(st.st_size);
  if (f->size_ > 0) {
    void* p = ::mmap(nullptr, f->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int e = errno;
      ::close(fd);
      fail("{}: cannot map {} bytes: {}", path, f->size_, std::strerror(e));
    }
    f->data_ = static_cast<const std::byte*>(p);
  }
  f->fd_ = fd;
  return f;
}

MappedFile::~MappedFile() {
  if (data_) ::munmap(const_cast<std::byte*>(data_), size_);
  if (fd_ >= 0) ::close(fd_);
}

void MappedFile::read_at(size_t offset, void* dst, size_t bytes) const {
  if (offset > size_ || bytes > size_ - offset)
    fail("{}: read of {} bytes at offset {} runs past the end of the file ({} bytes)", path_, bytes, offset, size_);
  auto* out = static_cast<char*>(dst);
  while (bytes > 0) {
    const ssize_t n = ::pread(fd_, out, bytes, static_cast<off_t>(offset));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      fail("{}: read at offset {} failed: {} (was the file truncated or its disk removed?)", path_, offset,
           n == 0 ? "unexpected end of file" : std::strerror(errno));
    out += n;
    offset += static_cast<size_t>(n);
    bytes -= static_cast<size_t>(n);
  }
}

}  // namespace h3

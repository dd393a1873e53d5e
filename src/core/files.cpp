// Input and output file checks (core/files.h).
#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace h3 {

namespace {

const char* kind_of(mode_t m) {
  return S_ISDIR(m)    ? "a folder"
         : S_ISFIFO(m) ? "a FIFO (named pipe)"
         : S_ISCHR(m)  ? "a character device"
         : S_ISBLK(m)  ? "a block device"
         : S_ISSOCK(m) ? "a socket"
                       : "not a regular file";
}

}  // namespace

void check_input_file(const std::string& path, const std::string& what) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) fail("{} {}: cannot open: {}", what, path, std::strerror(errno));
  if (!S_ISREG(st.st_mode)) fail("{} {} is {}; give a regular file", what, path, kind_of(st.st_mode));
}

void check_output_file(const std::string& path, const std::string& what) {
  if (path.empty()) fail("{}: no output path given", what);
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode))
    fail(
        "{} {} exists and is {}: the output is written to a new file and renamed over this path, which would "
        "replace it; give a regular file path (to stream the result, write a file and copy it)",
        what, path, kind_of(st.st_mode));
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    fail("{} {}: the folder {} does not exist (create it first)", what, path, parent.string());
}

std::string read_text_file_checked(const std::string& path, const std::string& what, size_t max_bytes) {
  // O_NONBLOCK: opening a FIFO must not wait for a writer; the check below refuses it at once.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) fail("{} {}: cannot open: {}", what, path, std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const mode_t m = st.st_mode;
    ::close(fd);
    fail("{} {} is {}; give a regular file", what, path, kind_of(m));
  }
  if (static_cast<size_t>(st.st_size) > max_bytes) {
    ::close(fd);
    fail("{} {}: {} bytes, more than the {} this file may have", what, path, st.st_size, max_bytes);
  }
  std::string text(static_cast<size_t>(st.st_size), '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = ::pread(fd, text.data() + got, text.size() - got, static_cast<off_t>(got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  return text;
}

}  // namespace h3

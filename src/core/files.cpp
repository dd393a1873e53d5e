// Input and output file checks (core/files.h).
#include "core/files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
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
  // The writers make PATH.partial and rename it: try to make it now (as root a mode-0555 folder takes it, as it
  // will at the end; a read-only file system or another user's folder does not).
  const std::string partial = path + ".partial";
  struct stat pst {};
  if (::lstat(partial.c_str(), &pst) == 0) return;
  const int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0) {
    if (errno == EEXIST) return;  // made by another writer meanwhile
    fail("{} {}: cannot write a file in {} ({}): choose an output path in a writable folder", what, path,
         parent.empty() ? std::string("the current folder") : parent.string(), std::strerror(errno));
  }
  ::close(fd);
  ::unlink(partial.c_str());
}

void check_output_not_input(const std::string& path, const std::vector<std::string>& inputs, const std::string& what) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path out = fs::weakly_canonical(fs::absolute(path, ec), ec);
  for (const std::string& in : inputs) {
    std::error_code e1, e2;
    if (in.empty() || !fs::exists(in, e1)) continue;
    if (fs::exists(path, e2) && fs::equivalent(path, in, e2))
      fail("{} {} is the input {}: writing it would replace what is being read; give another output path", what, path,
           in);
    if (fs::is_directory(in, e1)) {
      const fs::path dir = fs::weakly_canonical(fs::absolute(in, e1), e1);
      const auto [d, o] = std::mismatch(dir.begin(), dir.end(), out.begin(), out.end());
      if (d == dir.end())
        fail(
            "{} {} lies inside the input folder {}: writing it could replace a file being read; give an output "
            "path outside it",
            what, path, in);
    }
  }
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

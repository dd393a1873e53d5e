#include "serve/channel.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/json_limits.h"
#include "serve/store.h"

namespace h3::serve {

namespace {
constexpr size_t kMaxLine = size_t{64} << 20;  // a job message is a few KB; anything this long is a bug

sockaddr_un address(const std::string& path) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  if (path.size() >= sizeof(a.sun_path)) fail("control socket path '{}' is too long for a Unix socket", path);
  std::memcpy(a.sun_path, path.c_str(), path.size() + 1);
  return a;
}
}  // namespace

LineChannel::~LineChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void LineChannel::shutdown() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

bool LineChannel::send(const nlohmann::json& message) {
  std::string line = dump_json(message) + "\n";
  std::lock_guard lock(write_mu_);
  size_t off = 0;
  while (off < line.size()) {
    ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<size_t>(n);
  }
  return true;
}

std::optional<nlohmann::json> LineChannel::take_line() {
  for (;;) {
    size_t nl = buf_.find('\n');
    if (nl == std::string::npos) return std::nullopt;
    std::string line = buf_.substr(0, nl);
    buf_.erase(0, nl + 1);
    nlohmann::json j;
    try {
      j = parse_json_bounded(line, "control message", kJsonMaxDepth, false);
    } catch (const Error&) {
      continue;  // not a message of ours
    }
    if (j.is_object() && j.contains("type") && j["type"].is_string()) return j;
  }
}

std::optional<nlohmann::json> LineChannel::receive(int timeout_ms) {
  if (auto j = take_line()) return j;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (!eof_) {
    int wait = -1;
    if (timeout_ms >= 0) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      wait = static_cast<int>(std::max<int64_t>(0, left.count()));  // 0: one look at what is already there
    }
    pollfd p{fd_, POLLIN, 0};
    int r = ::poll(&p, 1, wait);
    if (r < 0 && errno == EINTR) continue;
    if (r == 0) return std::nullopt;
    char tmp[65536];
    ssize_t n = ::recv(fd_, tmp, sizeof(tmp), 0);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) continue;
    if (n <= 0) {
      eof_ = true;
      break;
    }
    buf_.append(tmp, static_cast<size_t>(n));
    if (auto j = take_line()) return j;
    if (buf_.size() > kMaxLine) {
      eof_ = true;  // a peer that sends garbage this long is not our worker
      break;
    }
  }
  return take_line();
}

int unix_listen(const std::string& path) {
  sockaddr_un a = address(path);
  ::unlink(path.c_str());
  int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("control socket: socket(): {}", std::strerror(errno));
  const mode_t old = ::umask(0077);
  int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  ::umask(old);
  if (rc != 0 || ::listen(fd, 4) != 0) {
    int e = errno;
    ::close(fd);
    fail("control socket {}: cannot listen: {}", path, std::strerror(e));
  }
  return fd;
}

int unix_connect(const std::string& path, double timeout_s) {
  sockaddr_un a = address(path);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  for (;;) {
    int fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) fail("control socket: socket(): {}", std::strerror(errno));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) return fd;
    int e = errno;
    ::close(fd);
    if (std::chrono::steady_clock::now() > deadline)
      fail("cannot connect to the supervisor's control socket {}: {}", path, std::strerror(e));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

}  // namespace h3::serve

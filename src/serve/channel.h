// The control channel between the supervisor (`h3 serve`) and rank 0 of the rank group (`h3 serve-worker`):
// one Unix stream socket carrying JSON objects, one per line. Messages (every one has "type"):
//   rank 0 -> supervisor: hello {token, ranks, hosts, pid}; ready {limits, models, load_s};
//                         progress {id, phase, step, steps, percent, eta_s};
//                         done {id, status: completed|failed|cancelled, error, result}
//   supervisor -> rank 0: job {id, request (resolved), out, fault}; cancel {id}; shutdown {}
#pragma once
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace h3::serve {

class LineChannel {
 public:
  explicit LineChannel(int fd) : fd_(fd) {}
  ~LineChannel();
  LineChannel(const LineChannel&) = delete;
  LineChannel& operator=(const LineChannel&) = delete;
  int fd() const { return fd_; }
  // Writes one message (thread-safe); false when the peer is gone.
  bool send(const nlohmann::json& message);
  // The next complete message, waiting up to timeout_ms (< 0: forever). nullopt on timeout or at end of
  // stream (then eof() is true). A line that is not a JSON object is skipped.
  std::optional<nlohmann::json> receive(int timeout_ms);
  bool eof() const { return eof_; }
  // Shuts the socket down both ways (wakes a reader blocked in receive()).
  void shutdown();

 private:
  std::optional<nlohmann::json> take_line();
  int fd_;
  std::string buf_;
  bool eof_ = false;
  std::mutex write_mu_;
};

// A listening socket at `path` (replacing a stale one), mode 0600.
int unix_listen(const std::string& path);
// Connects to `path`, retrying until `timeout_s`; throws h3::Error on failure.
int unix_connect(const std::string& path, double timeout_s);

}  // namespace h3::serve

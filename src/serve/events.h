// Progress events for server-sent-event streams: one ordered log of the last events (job changes and rank
// group changes), which every stream reads from its own position. Publishing never blocks on a slow reader; a
// reader that falls more than the log's capacity behind skips ahead (and is told so).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3::serve {

struct Event {
  uint64_t seq = 0;
  std::string type;    // "video" (a job changed; data = the job object) or "group" (data = the health object)
  std::string job_id;  // empty for group events
  nlohmann::json data;
};

class EventHub {
 public:
  explicit EventHub(size_t capacity = 4096) : capacity_(capacity) {}
  uint64_t publish(const std::string& type, const std::string& job_id, nlohmann::json data);
  // Events with seq > after, waiting up to `timeout_ms` for the first one; `skipped` is set when some were
  // lost.
  std::vector<Event> wait_after(uint64_t after, int timeout_ms, bool* skipped = nullptr);
  uint64_t last_seq();
  // Waits up to `timeout_ms` for an event after `after` (or the hub closing); returns the last seq.
  uint64_t wait_seq(uint64_t after, int timeout_ms);
  // Wakes every waiter (shutdown).
  void close();
  bool closed();

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Event> log_;
  uint64_t seq_ = 0;
  size_t capacity_;
  bool closed_ = false;
};

// One SSE frame: "id: N\nevent: TYPE\ndata: JSON\n\n".
std::string sse_frame(const Event& e);

}  // namespace h3::serve

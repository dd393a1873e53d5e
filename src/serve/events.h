// Progress events for server-sent-event streams: one ordered log of the last events (job changes, previews and rank
// group changes), which every stream reads from its own position. Publishing never blocks on a slow reader; a
// reader that falls more than the log's capacity behind skips ahead (and is told so). Each event is kept as its SSE
// frame, made once when it is published and shared by every stream that sends it (a job object as text is a few KB,
// as a JSON tree several times that: 4096 of them were tens of MB of the server's memory).
#pragma once
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace h3::serve {

struct Event {
  uint64_t seq = 0;
  std::string type;    // "video" (a job changed; data = the job object), "preview" or "group" (the health object)
  std::string job_id;  // empty for group events
  std::shared_ptr<const std::string> frame;  // "id: N\nevent: TYPE\ndata: JSON\n\n"
  bool ends_job = false;                     // the job's final state or its deletion: its own stream ends here
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
std::string sse_frame(uint64_t seq, const std::string& type, const nlohmann::json& data);
// Whether `data` of a "video" event ends its job's stream (a final status, or the job deleted).
bool ends_job(const nlohmann::json& data);

}  // namespace h3::serve

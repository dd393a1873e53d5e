#include "serve/events.h"

#include <chrono>

#include "serve/store.h"

namespace h3::serve {

uint64_t EventHub::publish(const std::string& type, const std::string& job_id, nlohmann::json data) {
  uint64_t s;
  {
    std::lock_guard lock(mu_);
    s = ++seq_;
    const bool ends = type == "video" && ends_job(data);
    log_.push_back(Event{s, type, job_id, std::make_shared<const std::string>(sse_frame(s, type, data)), ends});
    while (log_.size() > capacity_) log_.pop_front();
  }
  cv_.notify_all();
  return s;
}

std::vector<Event> EventHub::wait_after(uint64_t after, int timeout_ms, bool* skipped) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return seq_ > after || closed_; });
  std::vector<Event> out;
  if (skipped) *skipped = !log_.empty() && log_.front().seq > after + 1 && seq_ > after;
  for (const auto& e : log_)
    if (e.seq > after) out.push_back(e);
  return out;
}

uint64_t EventHub::wait_seq(uint64_t after, int timeout_ms) {
  std::unique_lock lock(mu_);
  cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return seq_ > after || closed_; });
  return seq_;
}

uint64_t EventHub::last_seq() {
  std::lock_guard lock(mu_);
  return seq_;
}

void EventHub::close() {
  {
    std::lock_guard lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

bool EventHub::closed() {
  std::lock_guard lock(mu_);
  return closed_;
}

std::string sse_frame(uint64_t seq, const std::string& type, const nlohmann::json& data) {
  // JSON from nlohmann::json::dump() has no raw newlines, so one data line carries it.
  return "id: " + std::to_string(seq) + "\nevent: " + type +
         "\ndata: " + data.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n\n";
}

bool ends_job(const nlohmann::json& data) {
  if (!data.is_object()) return false;
  if (data.value("deleted", false)) return true;
  const auto it = data.find("status");
  return it != data.end() && it->is_string() && is_terminal(it->get<std::string>());
}

}  // namespace h3::serve

// The HTTP front's server-sent-event streams (serve/http_front.h): a stream's connection is suspended while it
// waits for events and resumed by the notifier thread when one is published (or after a second, for heartbeats
// and departed clients), so a waiting client holds no thread.
#include <cstring>

#include "serve/http_front.h"

namespace h3::serve {

// New frames for `s` without blocking: events after its position, a heartbeat after 5 s of silence.
void HttpServer::Impl::fill(Stream& s) {
  if (sup.events().closed()) {
    s.ended = true;
    return;
  }
  bool skipped = false;
  for (const Event& e : sup.events().wait_after(s.after, 0, &skipped)) {
    s.after = e.seq;
    if (!s.job.empty() && e.job_id != s.job) continue;
    s.pending += *e.frame;
    if (!s.job.empty() && e.ends_job) {
      s.ended = true;
      break;
    }
  }
  const auto now = std::chrono::steady_clock::now();
  if (s.pending.empty() && !s.ended && now - s.last_write > std::chrono::seconds(kSseHeartbeatS))
    s.pending = ": keep-alive\n\n";
  if (!s.pending.empty()) s.last_write = now;
}

// Suspends `s` until the notifier resumes it; false when it must not wait (new events, or shutting down).
// Suspending under the lock the notifier resumes under: no resume can come before its suspend.
bool HttpServer::Impl::park(Stream* s) {
  std::lock_guard lock(sse_mu);
  if (sse_stopping) {
    s->ended = true;
    return false;
  }
  if (sup.events().last_seq() > s->after) return false;
  MHD_suspend_connection(s->conn);
  parked.push_back(s);
  return true;
}

ssize_t HttpServer::Impl::sse_read(void* cls, uint64_t, char* buf, size_t max) {
  auto* s = static_cast<Stream*>(cls);
  for (;;) {
    if (s->sent < s->pending.size()) {
      const size_t n = std::min(max, s->pending.size() - s->sent);
      std::memcpy(buf, s->pending.data() + s->sent, n);
      s->sent += n;
      if (s->sent == s->pending.size()) {
        s->pending.clear();
        s->sent = 0;
      }
      return static_cast<ssize_t>(n);
    }
    if (s->ended) return MHD_CONTENT_READER_END_OF_STREAM;
    s->impl->fill(*s);
    if (!s->pending.empty() || s->ended) continue;
    if (s->impl->park(s)) return 0;
  }
}

void HttpServer::Impl::sse_free(void* cls) {
  auto* s = static_cast<Stream*>(cls);
  Impl* self = s->impl;
  {
    std::lock_guard lock(self->sse_mu);
    self->parked.erase(std::remove(self->parked.begin(), self->parked.end(), s), self->parked.end());
  }
  --self->streams;
  --self->sup.sse_streams;
  delete s;
}

void HttpServer::Impl::notify_loop() {
  uint64_t seen = sup.events().last_seq();
  for (;;) {
    // An event, or a second for heartbeats and departed clients (a suspended connection notices nothing).
    const uint64_t now = sup.events().wait_seq(seen, 1000);
    if (now == seen && sup.events().closed()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    seen = now;
    std::lock_guard lock(sse_mu);
    for (Stream* s : parked) MHD_resume_connection(s->conn);
    parked.clear();
    if (sse_stopping) return;
  }
}

}  // namespace h3::serve

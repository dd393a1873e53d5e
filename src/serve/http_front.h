// The HTTP front's insides (serve/http.h), shared by its files: serve/http.cpp (requests: the rules, the routes,
// the answers; the daemon's life) and serve/http_streams.cpp (server-sent-event streams). Not for other users.
#pragma once
#include <microhttpd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdarg>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "serve/http.h"
#include "serve/http_policy.h"
#include "serve/http_routes.h"

namespace h3::serve {

inline constexpr int kSseHeartbeatS = 5;
inline constexpr unsigned kEventThreads = 2;

// A fixed set of threads with a bounded queue; post() refuses when full or stopped.
class WorkPool {
 public:
  void start(unsigned threads, size_t max_pending) {
    max_pending_ = max_pending;
    for (unsigned i = 0; i < threads; ++i) threads_.emplace_back([this] { loop(); });
  }
  bool post(std::function<void()> f) {
    {
      std::lock_guard lock(mu_);
      if (stopping_ || queue_.size() >= max_pending_) return false;
      queue_.push_back(std::move(f));
    }
    cv_.notify_one();
    return true;
  }
  // Runs what is queued, then joins.
  void stop() {
    {
      std::lock_guard lock(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& t : threads_)
      if (t.joinable()) t.join();
    threads_.clear();
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock lock(mu_);
        cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
        if (queue_.empty()) return;
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  std::vector<std::thread> threads_;
  size_t max_pending_ = 0;
  bool stopping_ = false;
};

// One request on its way through the front, made when its request line has been read (on_uri).
struct Call {
  bool begun = false;     // begin() has run: the headers are in
  size_t uri_bytes = 0;   // the request target as sent (path and query, before unescaping)
  bool uri_clean = true;  // no space or control byte in it
  HttpRequest req;
  const Route* route = nullptr;
  HttpResponse res;
  bool decided = false;       // `res` is the answer (a refusal or the handler's result)
  bool body_follows = false;  // a body comes (no "Expect: 100-continue"): a refusal is sent once it is read
  bool too_large = false;     // the body passed --max-body: it is discarded and 413 answered
  bool over_budget = false;   // the bodies of all requests passed max_body_total: discarded, 503 answered
  size_t counted = 0;         // body bytes this request holds in the front's budget
  size_t discarded = 0;       // body bytes read and dropped
  bool dispatched = false;    // handed to a pool; the connection is suspended until `finished`
  std::atomic<bool> finished{false};
};

// One server-sent-event stream (the response's content reader).
struct Stream {
  HttpServer::Impl* impl = nullptr;
  MHD_Connection* conn = nullptr;
  std::string job;  // "" = every event
  uint64_t after = 0;
  std::string pending;
  size_t sent = 0;
  bool ended = false;
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
};

struct HttpServer::Impl {
  Supervisor& sup;
  HttpLimits lim;
  std::vector<std::string> allowed_hosts;
  std::vector<Route> routes;
  MHD_Daemon* daemon = nullptr;
  int port = 0;
  WorkPool api_pool, submit_pool;
  std::atomic<size_t> body_bytes{0};  // held by all requests' bodies

  std::mutex log_mu;
  std::string last_log;

  // Streams waiting for events (their connections suspended); the notifier resumes them.
  std::mutex sse_mu;
  std::vector<Stream*> parked;
  bool sse_stopping = false;
  std::atomic<unsigned> streams{0};
  std::thread notifier;

  std::mutex stop_mu;
  std::condition_variable stop_cv;
  bool stopped = false;

  explicit Impl(Supervisor& s) : sup(s), lim(s.options().http), allowed_hosts(s.options().allowed_hosts) {
    routes = make_routes(sup);
  }

  // ---- answering (serve/http.cpp)
  void count(int status);
  MHD_Result send(MHD_Connection* c, Call& call);
  void refuse(Call& call, int status, const std::string& code, const std::string& message);
  void run_handler(Call& call);

  // ---- the request's first call: everything known from the request line and headers, step by step; each check
  // either refuses (call.decided) or lets the next one look
  void begin(Call& call, MHD_Connection* c, const char* url, const char* method, const char* version);
  void check_head(Call& call, MHD_Connection* c, const char* version);  // URL, header sizes, framing, Host
  void find_route(Call& call);                                          // 404 / 405 when none takes it
  void check_access(Call& call);                                        // API key, cross-origin
  void check_body(Call& call);                                          // Content-Type, Content-Length

  // ---- MHD callbacks
  // The request line is read (the headers are not yet): the Call starts here, with the target as sent.
  static void* on_uri(void* cls, const char* uri, MHD_Connection*);
  static MHD_Result on_request(void* cls, MHD_Connection* c, const char* url, const char* method, const char* version,
                               const char* upload_data, size_t* upload_size, void** con_cls);
  // Drops a request's body and its share of the budget.
  void release(Call& call);
  static void on_completed(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode);
  static void on_log(void* cls, const char* fmt_str, va_list ap);

  // ---- event streams (serve/http_streams.cpp)
  // New frames for `s` without blocking: events after its position, a heartbeat after 5 s of silence.
  void fill(Stream& s);
  // Suspends `s` until the notifier resumes it; false when it must not wait (new events, or shutting down).
  // Suspending under the lock the notifier resumes under: no resume can come before its suspend.
  bool park(Stream* s);
  static ssize_t sse_read(void* cls, uint64_t, char* buf, size_t max);
  static void sse_free(void* cls);
  void notify_loop();
};

}  // namespace h3::serve

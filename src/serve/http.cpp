#include "serve/http.h"

#include <httplib.h>
#include <sys/socket.h>

#include <chrono>
#include <fstream>

#include "core/error.h"
#include "core/log.h"

namespace h3::serve {

namespace {

constexpr int kMaxJsonDepth = 32;
constexpr int kSseHeartbeatS = 5;

std::string error_body(int status, const std::string& code, const std::string& message) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return dump_json({{"error", {{"message", message}, {"type", type}, {"code", code}}}});
}

void send_error(httplib::Response& res, int status, const std::string& code, const std::string& message) {
  res.status = status;
  res.set_content(error_body(status, code, message), "application/json");
}

void send_json(httplib::Response& res, const nlohmann::json& j, int status = 200) {
  res.status = status;
  res.set_content(dump_json(j), "application/json");
}

// Deepest nesting of arrays/objects in a JSON text (outside strings); the parser is never given a deep bomb.
int json_depth(const std::string& s) {
  int depth = 0, worst = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"')
      in_string = true;
    else if (c == '[' || c == '{')
      worst = std::max(worst, ++depth);
    else if (c == ']' || c == '}')
      --depth;
  }
  return worst;
}

bool constant_time_equal(const std::string& a, const std::string& b) {
  unsigned char diff = a.size() == b.size() ? 0 : 1;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i % (b.empty() ? 1 : b.size())]);
  return diff == 0 && !b.empty();
}

}  // namespace

// cpp-httplib 0.11 (Debian 12) listens with a backlog of 5, compiled in; a burst of new connections (hundreds
// of pollers, one connection per request) would overflow it and stall clients in SYN retries. listen() again
// on the bound socket widens the backlog.
class BacklogServer : public httplib::Server {
 public:
  void widen_backlog() { ::listen(svr_sock_, SOMAXCONN); }
};

struct HttpServer::Impl {
  Supervisor& sup;
  BacklogServer svr;
  int port = 0;

  explicit Impl(Supervisor& s) : sup(s) {}

  template <typename F>
  httplib::Server::Handler guard(F f) {
    return [this, f](const httplib::Request& req, httplib::Response& res) {
      try {
        f(req, res);
      } catch (const ApiError& e) {
        if (e.status == 503) res.set_header("Retry-After", "5");
        send_error(res, e.status, e.code, e.message);
      } catch (const std::exception& e) {
        spdlog::error("serve: {} {} failed: {}", req.method, req.path, e.what());
        send_error(res, 500, "internal_error", std::string("internal error: ") + e.what());
      }
    };
  }

  static std::string path_id(const httplib::Request& req) { return req.matches.size() > 1 ? req.matches[1].str() : ""; }

  void routes() {
    const ServeOptions& o = sup.options();
    svr.set_payload_max_length(o.max_body_bytes);
    // One request per connection: cpp-httplib 0.11 waits for the next request of a kept-alive connection by
    // polling the socket every 10 ms on the connection's thread, so hundreds of idle keep-alive clients cost
    // a core; and a client whose reused connection timed out meanwhile sees it closed under its next request.
    // A connection per request costs a loopback handshake, and SSE streams hold their connection anyway.
    svr.set_keep_alive_max_count(1);
    svr.set_keep_alive_timeout(5);
    svr.set_read_timeout(10);
    svr.set_write_timeout(10);
    const size_t threads = static_cast<size_t>(std::max(8, o.http_threads));
    svr.new_task_queue = [threads] { return new httplib::ThreadPool(threads); };

    svr.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
      ++sup.http_requests;
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-store");
      const std::string& key = sup.options().api_key;
      if (key.empty() || req.path == "/" || req.path == "/health") return httplib::Server::HandlerResponse::Unhandled;
      const std::string auth = req.get_header_value("Authorization");
      const std::string prefix = "Bearer ";
      if (auth.rfind(prefix, 0) == 0 && constant_time_equal(auth.substr(prefix.size()), key))
        return httplib::Server::HandlerResponse::Unhandled;
      res.set_header("WWW-Authenticate", "Bearer");
      send_error(res, 401, "unauthorized", "missing or wrong API key (send 'Authorization: Bearer KEY')");
      return httplib::Server::HandlerResponse::Handled;
    });
    svr.set_error_handler(
        httplib::Server::HandlerWithResponse([this](const httplib::Request& req, httplib::Response& res) {
          if (res.status >= 500)
            ++sup.http_5xx;
          else if (res.status >= 400)
            ++sup.http_4xx;
          if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
          std::string msg = res.status == 404   ? "no such route: " + req.method + " " + req.path.substr(0, 200)
                            : res.status == 413 ? fmt::format("the request body is larger than {} bytes (--max-body)",
                                                              sup.options().max_body_bytes)
                            : res.status == 405 ? "method not allowed"
                                                : "bad request";
          std::string code = res.status == 404 ? "not_found" : res.status == 413 ? "too_large" : "bad_request";
          res.set_content(error_body(res.status, code, msg), "application/json");
          return httplib::Server::HandlerResponse::Handled;
        }));
    svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
      send_error(res, 500, "internal_error", "internal error");
    });

    svr.Get("/", [](const httplib::Request&, httplib::Response& res) {
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
                     "media-src blob:; img-src data:; base-uri 'none'; form-action 'none'");
      res.set_content(web_page_html(), "text/html; charset=utf-8");
    });
    svr.Get("/health", guard([this](const httplib::Request&, httplib::Response& res) {
              send_json(res, sup.health(), sup.ready() ? 200 : 503);
            }));
    svr.Get("/metrics", guard([this](const httplib::Request&, httplib::Response& res) {
              res.set_content(sup.metrics(), "text/plain; version=0.0.4; charset=utf-8");
            }));
    svr.Get("/v1/models",
            guard([this](const httplib::Request&, httplib::Response& res) { send_json(res, sup.models()); }));
    svr.Post("/v1/videos", guard([this](const httplib::Request& req, httplib::Response& res) {
               if (req.body.empty()) throw ApiError{400, "invalid_request", "the body must be a JSON object"};
               if (json_depth(req.body) > kMaxJsonDepth)
                 throw ApiError{400, "invalid_json", fmt::format("JSON nested deeper than {} levels", kMaxJsonDepth)};
               auto body = nlohmann::json::parse(req.body, nullptr, false);
               if (body.is_discarded()) throw ApiError{400, "invalid_json", "the body is not valid JSON"};
               JobRecord r = sup.submit(body);
               res.set_header("Location", "/v1/videos/" + r.id);
               send_json(res, sup.job_json(r), 202);
             }));
    svr.Get("/v1/videos", guard([this](const httplib::Request& req, httplib::Response& res) { list(req, res); }));
    svr.Get(R"(/v1/videos/([^/]+))", guard([this](const httplib::Request& req, httplib::Response& res) {
              send_json(res, sup.job_json(sup.get(path_id(req))));
            }));
    svr.Delete(R"(/v1/videos/([^/]+))", guard([this](const httplib::Request& req, httplib::Response& res) {
                 const std::string id = path_id(req);
                 sup.remove(id);
                 send_json(res, {{"id", id}, {"object", "video.deleted"}, {"deleted", true}});
               }));
    svr.Post(R"(/v1/videos/([^/]+)/cancel)", guard([this](const httplib::Request& req, httplib::Response& res) {
               send_json(res, sup.job_json(sup.cancel(path_id(req))));
             }));
    svr.Get(R"(/v1/videos/([^/]+)/content)",
            guard([this](const httplib::Request& req, httplib::Response& res) { content(req, res); }));
    svr.Get(R"(/v1/videos/([^/]+)/events)", guard([this](const httplib::Request& req, httplib::Response& res) {
              JobRecord r = sup.get(path_id(req));
              events(res, r.id);
            }));
    svr.Get("/v1/events", guard([this](const httplib::Request&, httplib::Response& res) { events(res, ""); }));
  }

  void list(const httplib::Request& req, httplib::Response& res) {
    int64_t limit = 20;
    if (req.has_param("limit")) {
      const std::string v = req.get_param_value("limit");
      if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos || std::stoll(v) < 1 ||
          std::stoll(v) > 100)
        throw ApiError{400, "invalid_request", "'limit' must be an integer 1 .. 100"};
      limit = std::stoll(v);
    }
    bool desc = true;
    if (req.has_param("order")) {
      const std::string v = req.get_param_value("order");
      if (v != "asc" && v != "desc") throw ApiError{400, "invalid_request", "'order' must be asc or desc"};
      desc = v == "desc";
    }
    std::string status;
    if (req.has_param("status")) {
      status = req.get_param_value("status");
      if (status != kQueued && status != kRunning && status != kCompleted && status != kFailed && status != kCancelled)
        throw ApiError{400, "invalid_request", "'status' must be queued, in_progress, completed, failed or cancelled"};
    }
    std::optional<int64_t> after;
    if (req.has_param("after")) {
      const std::string v = req.get_param_value("after");
      if (!valid_job_id(v)) throw ApiError{400, "invalid_request", "'after' must be a video id"};
      auto r = sup.store().get(v);
      if (!r) throw ApiError{404, "not_found", "'after': no video with this id"};
      after = r->seq;
    }
    auto rows = sup.store().list(limit + 1, after, desc, status);
    const bool more = static_cast<int64_t>(rows.size()) > limit;
    if (more) rows.pop_back();
    nlohmann::json data = nlohmann::json::array();
    for (const auto& r : rows) data.push_back(sup.job_json(r));
    send_json(res, {{"object", "list"},
                    {"data", data},
                    {"first_id", rows.empty() ? nlohmann::json() : nlohmann::json(rows.front().id)},
                    {"last_id", rows.empty() ? nlohmann::json() : nlohmann::json(rows.back().id)},
                    {"has_more", more}});
  }

  void content(const httplib::Request& req, httplib::Response& res) {
    JobRecord r = sup.get(path_id(req));
    if (req.has_param("variant") && req.get_param_value("variant") != "video")
      throw ApiError{400, "invalid_request", "'variant' must be video"};
    if (r.status != kCompleted || r.output_bytes <= 0)
      throw ApiError{409, "not_ready", fmt::format("the video is {}; content exists once it is completed", r.status)};
    // The path comes from the store and the server's own id, never from the request.
    const std::string path = sup.store().output_path(r.id);
    auto file = std::make_shared<std::ifstream>(path, std::ios::binary);
    if (!*file) throw ApiError{410, "gone", "the video file is missing from the store"};
    file->seekg(0, std::ios::end);
    const auto size = static_cast<size_t>(file->tellg());
    res.set_header("Content-Disposition", "inline; filename=\"" + r.id + ".mp4\"");
    res.set_content_provider(size, "video/mp4", [file](size_t offset, size_t length, httplib::DataSink& sink) {
      char buf[65536];
      file->clear();
      file->seekg(static_cast<std::streamoff>(offset));
      while (length > 0) {
        const size_t n = std::min(length, sizeof(buf));
        file->read(buf, static_cast<std::streamsize>(n));
        if (file->gcount() <= 0) return false;
        if (!sink.write(buf, static_cast<size_t>(file->gcount()))) return false;
        length -= static_cast<size_t>(file->gcount());
      }
      return true;
    });
  }

  // A server-sent-event stream of every event (job_id empty) or of one job (ends after its final state).
  void events(httplib::Response& res, const std::string& job_id) {
    struct Stream {
      uint64_t after = 0;
      bool started = false;
      std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
    };
    auto st = std::make_shared<Stream>();
    st->after = sup.events().last_seq();
    res.set_header("X-Accel-Buffering", "no");
    ++sup.sse_streams;
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, st, job_id](size_t, httplib::DataSink& sink) {
          auto write = [&](const std::string& s) {
            st->last_write = std::chrono::steady_clock::now();
            return sink.write(s.data(), s.size());
          };
          if (!st->started) {
            st->started = true;
            // First the current state, so a client needs no separate GET.
            Event snap;
            snap.seq = st->after;
            if (job_id.empty()) {
              snap.type = "group";
              snap.data = sup.health();
            } else {
              auto r = sup.store().get(job_id);
              if (!r) {
                sink.done();
                return true;
              }
              snap.type = "video";
              snap.job_id = job_id;
              snap.data = sup.job_json(*r);
              if (!write("retry: 2000\n\n" + sse_frame(snap))) return false;
              if (is_terminal(r->status)) sink.done();
              return true;
            }
            return write("retry: 2000\n\n" + sse_frame(snap));
          }
          if (sup.events().closed()) {
            sink.done();
            return true;
          }
          bool skipped = false;
          auto evs = sup.events().wait_after(st->after, 1000, &skipped);
          for (const auto& e : evs) {
            st->after = e.seq;
            if (!job_id.empty() && e.job_id != job_id) continue;
            if (!write(sse_frame(e))) return false;
            if (!job_id.empty() &&
                (e.data.value("deleted", false) || is_terminal(e.data.value("status", std::string())))) {
              sink.done();
              return true;
            }
          }
          if (std::chrono::steady_clock::now() - st->last_write > std::chrono::seconds(kSseHeartbeatS))
            return write(": keep-alive\n\n");
          return true;
        },
        [this](bool) { --sup.sse_streams; });
  }
};

HttpServer::HttpServer(Supervisor& sup) : impl_(std::make_unique<Impl>(sup)) {
  impl_->routes();
}
HttpServer::~HttpServer() = default;

void HttpServer::bind() {
  const auto& o = impl_->sup.options();
  if (o.port == 0) {
    impl_->port = impl_->svr.bind_to_any_port(o.host);
    if (impl_->port <= 0) fail("serve: cannot listen on {} (any port)", o.host);
  } else {
    if (!impl_->svr.bind_to_port(o.host, o.port))
      fail("serve: cannot listen on {}:{} (in use, or not an address of this machine); choose --host/--port", o.host,
           o.port);
    impl_->port = o.port;
  }
  impl_->svr.widen_backlog();
}

void HttpServer::listen() {
  impl_->svr.listen_after_bind();
}
void HttpServer::stop() {
  impl_->svr.stop();
}
int HttpServer::port() const {
  return impl_->port;
}

}  // namespace h3::serve

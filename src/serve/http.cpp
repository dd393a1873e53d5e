// The HTTP front of `h3 serve` on GNU libmicrohttpd (Debian: libmicrohttpd-dev).
//
// Why libmicrohttpd: the front must stay responsive while hundreds of clients are connected and idle, slow
// (a byte every few seconds) or streaming events. A thread-per-connection server (cpp-httplib, used before)
// gives each such client a thread until its read timeout, so N + 1 slow clients hold every thread and
// /health stops answering. libmicrohttpd polls every connection from a few event threads (epoll), bounds
// each connection's memory (headers and buffers in a fixed pool; a head larger than the pool is refused by
// libmicrohttpd itself, a smaller one past the limits by begin() with the API's JSON), closes
// connections idle for --http-idle-timeout, caps the number of connections, handles chunked bodies, sets
// SO_REUSEADDR but never SO_REUSEPORT (a second server on the same port fails to bind), and lets a request
// be suspended while another thread works on it, which is how event streams wait for events and how API
// requests run off the event threads.
//
// Threads: the event threads only parse, check (serve/http_policy.h) and answer the routes that never block
// (/health, the page, the event streams' framing). Store reads and writes run on the API pool, job submission
// (body parsing, upload decoding, media probing) on the submit pool; the connection is suspended meanwhile
// and resumed with the answer. A full pool answers 503 at once.
#include <fmt/ranges.h>
#include <netdb.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string_view>

#include "core/error.h"
#include "core/log.h"
#include "serve/http_front.h"

namespace h3::serve {

namespace {

bool has_body_method(const std::string& m) {
  return m == "POST" || m == "PUT" || m == "PATCH";
}

bool changes_state(const std::string& m) {
  return m != "GET" && m != "HEAD" && m != "OPTIONS";
}

// Whether a body follows the headers without waiting for the server. A refusal decided from the headers then waits
// for the body, read and dropped (on_request): the OpenAI SDKs, Python and browsers write the whole body before
// they read, and a server that answers and closes early resets the connection under them (EPIPE, and the answer
// lost with the unread bytes). A client that sent "Expect: 100-continue" is answered at once and sends no body.
bool body_follows(const HttpRequest& q) {
  const std::string& length = q.header("content-length");
  const bool has_body = !q.header("transfer-encoding").empty() || (!length.empty() && length != "0");
  const std::string& expect = q.header("expect");
  return has_body && !(expect.size() == 12 && strncasecmp(expect.c_str(), "100-continue", 12) == 0);
}

// Two Content-Length fields that differ: which body is meant is unknowable (RFC 9112 6.3), and a proxy in front
// may have read the other one.
bool lengths_differ(const HttpRequest& q) {
  const std::string* first = nullptr;
  for (const auto& [k, v] : q.headers)
    if (k == "content-length") {
      if (first && *first != v) return true;
      first = &v;
    }
  return false;
}

// The body's framing as RFC 9112 section 6 lets a server take it: no Transfer-Encoding, or one field saying
// "chunked" with no Content-Length beside it. libmicrohttpd reads any other coding as a body that ends with the
// connection (the client would wait for an answer until the idle timeout), and takes "chunked" over a Content-Length
// that a proxy in front may have believed instead (request smuggling). Empty when the framing is one of those.
struct Refusal {
  int status;
  std::string code, message;
};
std::optional<Refusal> framing_refusal(const HttpRequest& q) {
  int codings = 0;
  for (const auto& [k, v] : q.headers) codings += k == "transfer-encoding" ? 1 : 0;
  if (codings == 0) return std::nullopt;
  if (codings > 1 || !q.header("content-length").empty())
    return Refusal{400, "bad_request",
                   "the request has Transfer-Encoding together with Content-Length or another Transfer-Encoding: "
                   "its body's length is ambiguous"};
  std::string_view te = q.header("transfer-encoding");
  while (!te.empty() && (te.front() == ' ' || te.front() == '\t')) te.remove_prefix(1);
  while (!te.empty() && (te.back() == ' ' || te.back() == '\t')) te.remove_suffix(1);
  if (te.size() == 7 && strncasecmp(te.data(), "chunked", 7) == 0) return std::nullopt;
  return Refusal{501, "not_implemented",
                 fmt::format("Transfer-Encoding '{}' is not supported: send the body with Content-Length or chunked",
                             te.substr(0, 100))};
}

}  // namespace

void HttpServer::Impl::count(int status) {
  if (status >= 500)
    ++sup.http_5xx;
  else if (status >= 400)
    ++sup.http_4xx;
}

MHD_Result HttpServer::Impl::send(MHD_Connection* c, Call& call) {
  HttpResponse& r = call.res;
  MHD_Response* resp = nullptr;
  if (r.stream && r.status == 200 && call.req.method != "HEAD") {
    if (streams.load() >= lim.max_streams) {
      r.stream = false;
      r.error(503, "too_many_streams",
              fmt::format("{} event streams are open (the server's limit); retry later", lim.max_streams));
      r.headers.emplace_back("Retry-After", "5");
    } else {
      auto* s = new Stream;
      s->impl = this;
      s->conn = c;
      s->job = r.stream_job;
      s->after = r.stream_after;
      s->pending = r.body;
      s->ended = r.stream_ended;
      ++streams;
      ++sup.sse_streams;
      resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, &Impl::sse_read, s, &Impl::sse_free);
      r.content_type = "text/event-stream";
      r.headers.emplace_back("X-Accel-Buffering", "no");
    }
  }
  if (!resp && r.file_fd >= 0) {
    resp = MHD_create_response_from_fd_at_offset64(r.file_length, r.file_fd, r.file_offset);
    if (resp) r.file_fd = -1;  // owned by the response now
  }
  if (!resp) {
    if (r.file_fd >= 0) {
      ::close(r.file_fd);
      r.file_fd = -1;
    }
    resp = MHD_create_response_from_buffer(r.body.size(), r.body.data(), MHD_RESPMEM_MUST_COPY);
  }
  if (!resp) return MHD_NO;
  MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
  MHD_add_response_header(resp, "X-Content-Type-Options", "nosniff");
  MHD_add_response_header(resp, "Cache-Control", "no-store");
  MHD_add_response_header(resp, "Cross-Origin-Resource-Policy", "same-origin");
  MHD_add_response_header(resp, "Referrer-Policy", "no-referrer");
  for (const auto& [k, v] : r.headers) MHD_add_response_header(resp, k.c_str(), v.c_str());
  count(r.status);
  const MHD_Result ok = MHD_queue_response(c, static_cast<unsigned>(r.status), resp);
  MHD_destroy_response(resp);
  return ok;
}

void HttpServer::Impl::refuse(Call& call, int status, const std::string& code, const std::string& message) {
  call.res = HttpResponse{};
  call.res.error(status, code, message);
  call.decided = true;
}

void HttpServer::Impl::run_handler(Call& call) {
  try {
    call.route->handler(call.req, call.res);
    if (call.res.stream) {
      // The stream's first frames: the current state, so a client needs no separate GET. The stream
      // continues after the event seen before the snapshot was taken, so nothing is missed.
      const uint64_t after = sup.events().last_seq();
      std::string first = "retry: 2000\n\n";
      bool ended = false;
      if (call.res.stream_job.empty()) {
        first += sse_frame(after, "group", sup.health());
      } else {
        const JobRecord r = sup.get(call.res.stream_job);
        first += sse_frame(after, "video", sup.job_json(r));
        ended = is_terminal(r.status);
      }
      call.res.body = first;
      call.res.stream_after = after;
      call.res.stream_ended = ended;
    }
  } catch (const ApiError& e) {
    call.res = HttpResponse{};
    call.res.error(e.status, e.code, e.message);
    if (e.status == 503) call.res.headers.emplace_back("Retry-After", "5");
    // A conflict (not ready, running, not cancellable) does not resolve within the OpenAI SDKs' retry backoff.
    if (e.status == 409) call.res.headers.emplace_back("x-should-retry", "false");
  } catch (const std::exception& e) {
    // The details (which may name server paths) go to the log only.
    spdlog::error("serve: {} {} failed: {}", call.req.method, call.req.path.substr(0, 200), e.what());
    call.res = HttpResponse{};
    call.res.error(500, "internal_error", "internal error (the server log has the details)");
  }
  call.decided = true;
}

void HttpServer::Impl::begin(Call& call, MHD_Connection* c, const char* url, const char* method, const char* version) {
  HttpRequest& q = call.req;
  q.method = method ? method : "";
  q.path = url ? url : "";
  ++sup.http_requests;
  MHD_get_connection_values(
      c, MHD_HEADER_KIND,
      [](void* cls, MHD_ValueKind, const char* k, const char* v) -> MHD_Result {
        auto* req = static_cast<HttpRequest*>(cls);
        std::string name = k ? k : "";
        for (char& ch : name) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
        req->headers.emplace_back(std::move(name), v ? v : "");
        return MHD_YES;
      },
      &q);
  MHD_get_connection_values(
      c, MHD_GET_ARGUMENT_KIND,
      [](void* cls, MHD_ValueKind, const char* k, const char* v) -> MHD_Result {
        static_cast<HttpRequest*>(cls)->query.emplace(k ? k : "", v ? v : "");
        return MHD_YES;
      },
      &q);
  call.body_follows = body_follows(q);
  check_head(call, c, version);
  if (!call.decided) find_route(call);
  if (!call.decided) check_access(call);
  if (!call.decided) check_body(call);
}

void HttpServer::Impl::check_head(Call& call, MHD_Connection* c, const char* version) {
  const HttpRequest& q = call.req;
  // What libmicrohttpd would otherwise refuse itself, with its HTML (or, for a space in the target, no answer at
  // all), is answered here; the rest of what it refuses is in docs/api.md, "Errors".
  if (call.uri_bytes > lim.max_header_bytes)
    return refuse(call, 414, "uri_too_long",
                  fmt::format("the request's URL is longer than {} bytes", lim.max_header_bytes));
  const MHD_ConnectionInfo* hs = MHD_get_connection_info(c, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
  if (q.headers.size() > lim.max_headers || (hs && hs->header_size > lim.max_header_bytes))
    return refuse(call, 431, "headers_too_large",
                  fmt::format("the request has more than {} header fields or {} bytes of headers", lim.max_headers,
                              lim.max_header_bytes));
  if (!call.uri_clean)
    return refuse(call, 400, "bad_request",
                  "the request's URL holds a space or a control character (percent-encode it: %20)");
  const std::string_view v = version ? version : "";
  if (v.starts_with("HTTP/1.") && v != "HTTP/1.0" && q.header("host").empty())
    return refuse(call, 400, "bad_request", "an HTTP/1.1 request must have a Host field");
  if (lengths_differ(q)) {
    call.body_follows = false;  // and the connection closed
    return refuse(call, 400, "bad_request", "the request has two different Content-Length fields");
  }
  if (auto r = framing_refusal(q)) {
    call.body_follows = false;  // where the body ends is unknown: answered at once, and the connection closed
    return refuse(call, r->status, r->code, r->message);
  }
  const std::string& host = q.header("host");
  if (!host_allowed(host, allowed_hosts))
    return refuse(call, 421, "host_not_allowed",
                  fmt::format("Host '{}' is not an address of this server (DNS rebinding protection): use an IP "
                              "address or localhost, or start the server with --allowed-host NAME",
                              host.substr(0, 100)));
}

void HttpServer::Impl::find_route(Call& call) {
  HttpRequest& q = call.req;
  // The route: HEAD is answered as GET (without a body).
  const std::string m = q.method == "HEAD" ? "GET" : q.method;
  std::string allow;
  std::vector<std::string> groups;
  for (const Route& r : routes) {
    if (!route_matches(r.pattern, q.path, groups)) continue;
    if (r.method == m) {
      call.route = &r;
      q.matches = groups;
      break;
    }
    allow += (allow.empty() ? "" : ", ") + r.method;
  }
  if (!call.route) {
    // The OpenAI video API's other operations (remix, edits, extensions, characters) under /v1/videos/: named as
    // not supported, 404 whatever else the path matches (docs/api.md, "Not served").
    if (q.method == "POST" && q.path.starts_with("/v1/videos/") && !q.path.ends_with("/cancel"))
      return refuse(call, 404, "not_supported",
                    fmt::format("POST {} is not supported by this server: it makes videos from a prompt, keyframes "
                                "and references (POST /v1/videos); remix, edits, extensions and characters are not "
                                "served",
                                q.path.substr(0, 200)));
    if (allow.empty())
      return refuse(call, 404, "not_found", "no such route: " + q.method.substr(0, 20) + " " + q.path.substr(0, 200));
    refuse(call, 405, "method_not_allowed",
           fmt::format("{} is not allowed here (allowed: {})", q.method.substr(0, 20), allow));
    call.res.headers.emplace_back("Allow", allow);
  }
}

void HttpServer::Impl::check_access(Call& call) {
  const HttpRequest& q = call.req;
  const std::string& host = q.header("host");
  const std::string& key = sup.options().api_key;
  if (!key.empty() && !call.route->public_route) {
    const std::string& auth = q.header("authorization");
    if (!(auth.rfind("Bearer ", 0) == 0 && key_matches(std::string_view(auth).substr(7), key))) {
      refuse(call, 401, "unauthorized", "missing or wrong API key (send 'Authorization: Bearer KEY')");
      call.res.headers.emplace_back("WWW-Authenticate", "Bearer");
      return;
    }
  }
  if (changes_state(q.method) && !same_origin_or_absent(q.header("origin"), q.header("sec-fetch-site"), host))
    return refuse(call, 403, "cross_origin",
                  "cross-site requests are refused (the Origin is not this server's own); use the API from "
                  "the server's page or from a client that is not a browser");
}

void HttpServer::Impl::check_body(Call& call) {
  const HttpRequest& q = call.req;
  const std::string& length = q.header("content-length");
  const bool chunked = !q.header("transfer-encoding").empty();
  const bool body = chunked || (!length.empty() && length != "0");
  if (body && has_body_method(q.method)) {
    const std::string type = media_type(q.header("content-type"));
    const auto& ok = call.route->body_types;
    if (std::find(ok.begin(), ok.end(), type) == ok.end())
      return refuse(call, 415, "unsupported_media_type",
                    ok.empty() ? std::string("this route takes no body")
                               : fmt::format("the body must be {} (got Content-Type '{}')", fmt::join(ok, " or "),
                                             q.header("content-type").substr(0, 100)));
  }
  if (!length.empty()) {
    const bool digits = length.size() <= 19 && length.find_first_not_of("0123456789") == std::string::npos;
    if (!digits || std::stoull(length) > lim.max_body) {
      // A body a little over the limit is read and dropped, so that a client that sends the whole body before it
      // reads the answer (Python's http.client, most SDKs) gets the 413 instead of a reset connection; one far
      // over it (the bound of the chunked rule below) is refused at once and the connection closed.
      if (call.body_follows && digits && std::stoull(length) <= 4 * lim.max_body + (1u << 20)) {
        call.too_large = true;
        return;
      }
      // Past the bound nothing is read: answered at once, and the connection closed.
      call.body_follows = false;
      return refuse(call, 413, "too_large",
                    fmt::format("the request body is larger than {} bytes (--max-body)", lim.max_body));
    }
  }
}

void* HttpServer::Impl::on_uri(void*, const char* uri, MHD_Connection*) {
  auto* call = new Call;
  const std::string_view u = uri ? uri : "";
  call->uri_bytes = u.size();
  call->uri_clean = std::none_of(u.begin(), u.end(), [](char ch) {
    const auto b = static_cast<unsigned char>(ch);
    return b <= 0x20 || b == 0x7f;
  });
  return call;
}

MHD_Result HttpServer::Impl::on_request(void* cls, MHD_Connection* c, const char* url, const char* method,
                                        const char* version, const char* upload_data, size_t* upload_size,
                                        void** con_cls) {
  auto* self = static_cast<Impl*>(cls);
  auto* call = static_cast<Call*>(*con_cls);
  if (!call) {  // made by on_uri for every request; kept should a libmicrohttpd skip it
    call = new Call;
    *con_cls = call;
  }
  if (!call->begun) {
    call->begun = true;
    self->begin(*call, c, url, method, version);
    return call->decided && !call->body_follows ? self->send(c, *call) : MHD_YES;
  }
  if (*upload_size > 0) {
    if (call->decided) {
      // Refused from its headers: the body is dropped as it comes, then the answer sent (begin() says why).
      call->too_large = true;
    } else if (!call->too_large && call->req.body.size() + *upload_size > self->lim.max_body) {
      call->too_large = true;
      self->release(*call);
    }
    const size_t budget = std::max(self->lim.max_body_total, self->lim.max_body);
    if (!call->too_large && !call->over_budget && self->body_bytes.fetch_add(*upload_size) + *upload_size > budget) {
      self->body_bytes -= *upload_size;
      call->over_budget = true;
      self->release(*call);
    }
    if (call->too_large || call->over_budget) {
      call->discarded += *upload_size;
      // A chunked body far beyond the limit is not read to its end: the connection is closed.
      if (call->discarded > 4 * self->lim.max_body + (1u << 20)) return MHD_NO;
    } else {
      call->req.body.append(upload_data, *upload_size);
      call->counted += *upload_size;
    }
    *upload_size = 0;
    return MHD_YES;
  }
  if (call->dispatched) return call->finished ? self->send(c, *call) : MHD_YES;
  if (call->decided) return self->send(c, *call);
  if (call->too_large) {
    self->refuse(*call, 413, "too_large",
                 fmt::format("the request body is larger than {} bytes (--max-body)", self->lim.max_body));
    return self->send(c, *call);
  }
  if (call->over_budget) {
    self->refuse(*call, 503, "busy", "the server is receiving too many large bodies at once; retry in a moment");
    call->res.headers.emplace_back("Retry-After", "5");
    return self->send(c, *call);
  }
  if (call->route->where == Route::Where::event) {
    self->run_handler(*call);
    return self->send(c, *call);
  }
  WorkPool& pool = call->route->where == Route::Where::submit ? self->submit_pool : self->api_pool;
  call->dispatched = true;
  MHD_suspend_connection(c);
  const bool queued = pool.post([self, call, c] {
    self->run_handler(*call);
    call->finished = true;
    MHD_resume_connection(c);  // the last touch of `call` from this thread
  });
  if (!queued) {
    self->refuse(*call, 503, "busy", "the server is busy (too many requests waiting); retry in a moment");
    call->res.headers.emplace_back("Retry-After", "2");
    call->finished = true;
    MHD_resume_connection(c);
  }
  return MHD_YES;
}

// Drops a request's body and its share of the budget.
void HttpServer::Impl::release(Call& call) {
  body_bytes -= call.counted;
  call.counted = 0;
  std::string().swap(call.req.body);
}

void HttpServer::Impl::on_completed(void* cls, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
  auto* call = static_cast<Call*>(*con_cls);
  if (call) static_cast<Impl*>(cls)->release(*call);
  if (call && call->res.file_fd >= 0) ::close(call->res.file_fd);
  delete call;
  *con_cls = nullptr;
}

void HttpServer::Impl::on_log(void* cls, const char* fmt_str, va_list ap) {
  auto* self = static_cast<Impl*>(cls);
  char buf[512];
  std::vsnprintf(buf, sizeof(buf), fmt_str, ap);
  std::string line(buf);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
  spdlog::debug("serve: http: {}", line);
  std::lock_guard lock(self->log_mu);
  self->last_log = line;
}

HttpServer::HttpServer(Supervisor& sup) : impl_(std::make_unique<Impl>(sup)) {}

HttpServer::~HttpServer() {
  stop();
}

void HttpServer::bind() {
  Impl& m = *impl_;
  const ServeOptions& o = m.sup.options();
  addrinfo hints{}, *ai = nullptr;
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  const int gai = ::getaddrinfo(o.host.c_str(), std::to_string(o.port).c_str(), &hints, &ai);
  if (gai != 0 || !ai)
    fail("serve: --host {}: not an address this machine can listen on ({})", o.host, gai_strerror(gai));
  sockaddr_storage addr{};
  std::memcpy(&addr, ai->ai_addr, ai->ai_addrlen);
  const bool v6 = ai->ai_family == AF_INET6;
  ::freeaddrinfo(ai);
  m.api_pool.start(m.lim.api_threads, m.lim.max_pending);
  // Submissions wait as API requests do (max_pending); what they hold is bounded by max_body_total.
  m.submit_pool.start(m.lim.submit_threads, m.lim.max_pending);
  // A connection's memory (libmicrohttpd's pool: the request head, its fields' records, the read buffer) decides
  // who refuses a large head: one that fits reaches begin(), which answers 414 / 431 with the API's JSON; one that
  // does not is refused by libmicrohttpd with its own HTML. Four times the head limit lets heads up to ~60 KiB and
  // ~700 fields reach begin() (measured). The pool is mapped, but libmicrohttpd zeroes it whole between the requests
  // of a connection, so a kept-alive connection costs all of it: 256 MiB at --max-connections 4096, as much as the
  // bodies held at once (eight times, tried first, took longer heads for 512 MiB).
  const size_t pool_bytes = std::max<size_t>(32768, 4 * m.lim.max_header_bytes);
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
  if (v6) flags |= MHD_USE_IPv6;
  m.daemon = MHD_start_daemon(flags, 0, nullptr, nullptr, &Impl::on_request, &m, MHD_OPTION_SOCK_ADDR,
                              reinterpret_cast<sockaddr*>(&addr), MHD_OPTION_THREAD_POOL_SIZE, kEventThreads,
                              MHD_OPTION_CONNECTION_LIMIT, m.lim.max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
                              m.lim.idle_timeout_s, MHD_OPTION_CONNECTION_MEMORY_LIMIT, pool_bytes,
                              MHD_OPTION_NOTIFY_COMPLETED, &Impl::on_completed, &m, MHD_OPTION_URI_LOG_CALLBACK,
                              &Impl::on_uri, &m, MHD_OPTION_EXTERNAL_LOGGER, &Impl::on_log, &m,
                              // Level 1 adds two refusals to the default: a space in the URL (the connection closed
                              // without an answer) and HTTP/1.1 without Host (an HTML 400). begin() makes both with
                              // the API's JSON instead.
                              MHD_OPTION_STRICT_FOR_CLIENT, 0, MHD_OPTION_END);
  if (!m.daemon) {
    m.api_pool.stop();
    m.submit_pool.stop();
    std::string why;
    {
      std::lock_guard lock(m.log_mu);
      why = m.last_log;
    }
    // libmicrohttpd's line names the port it was given inside the address ("Failed to bind to port 0: ..."): only
    // the reason after its last ": " is shown.
    if (const size_t colon = why.rfind(": "); colon != std::string::npos) why = why.substr(colon + 2);
    fail("serve: cannot listen on {}:{} ({}); is another server using the port? choose --host/--port", o.host, o.port,
         why.empty() ? "in use, or not an address of this machine" : why);
  }
  const MHD_DaemonInfo* info = MHD_get_daemon_info(m.daemon, MHD_DAEMON_INFO_BIND_PORT);
  m.port = info ? info->port : o.port;
  m.notifier = std::thread([&m] { m.notify_loop(); });
}

void HttpServer::listen() {
  std::unique_lock lock(impl_->stop_mu);
  impl_->stop_cv.wait(lock, [&] { return impl_->stopped; });
}

void HttpServer::stop() {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.stop_mu);
    if (m.stopped || !m.daemon) {
      m.stopped = true;
      m.stop_cv.notify_all();
      return;
    }
  }
  const MHD_socket listen_fd = MHD_quiesce_daemon(m.daemon);
  // Streams end (their next read sees the flag), queued API work finishes and resumes its connections; only
  // then may the daemon stop (it must hold no suspended connection).
  {
    std::lock_guard lock(m.sse_mu);
    m.sse_stopping = true;
    for (Stream* s : m.parked) MHD_resume_connection(s->conn);
    m.parked.clear();
  }
  if (m.notifier.joinable()) m.notifier.join();
  m.api_pool.stop();
  m.submit_pool.stop();
  MHD_stop_daemon(m.daemon);
  if (listen_fd != MHD_INVALID_SOCKET) ::close(listen_fd);
  m.daemon = nullptr;
  std::lock_guard lock(m.stop_mu);
  m.stopped = true;
  m.stop_cv.notify_all();
}

int HttpServer::port() const {
  return impl_->port;
}

}  // namespace h3::serve

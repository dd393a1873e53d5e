// The request rules of `h3 serve`'s HTTP front that do not depend on the HTTP library: the security checks
// (Host against DNS rebinding, Origin / Sec-Fetch-Site against cross-site requests, the content types a route
// takes), the RFC 9110 Range header, and the limits the front enforces. docs/api.md "Limits" and "Security"
// describe them; tests/serve/test_http_policy.cpp checks them one by one.
//
// Why these rules make a key-less loopback server safe from web pages the user visits:
//   - DNS rebinding: a page of evil.example whose name is re-pointed at 127.0.0.1 reaches the server with
//     `Host: evil.example:PORT`. Only IP literals, `localhost` and the names given with --allowed-host are
//     served; anything else gets 421. (A rebinding attack always carries the attacker's name, never a literal.)
//   - Cross-site requests: a page can send a "simple" request (GET/POST with text/plain, form-urlencoded or
//     multipart/form-data, no custom header) without a CORS preflight. Every request that changes state
//     (POST, DELETE, PUT, PATCH) is refused with 403 when its Origin is present and is not this server's own
//     origin (same scheme-less host:port as Host), or when Sec-Fetch-Site says cross-site / same-site.
//     Clients that are not browsers (curl, SDKs) send neither header and are unaffected.
//   - Bodies must have a content type the route declares (application/json, and multipart/form-data on
//     POST /v1/videos for the OpenAI SDKs' form upload); anything else is 415. The Origin rule above is what keeps
//     the form route safe, since multipart needs no preflight.
//   - No CORS headers are ever sent, so no other origin may read a response; responses carry
//     Cross-Origin-Resource-Policy: same-origin so videos cannot be embedded by other sites either.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace h3::serve {

// Limits of the HTTP front (ServeOptions fills them from the command line; docs/api.md lists them).
struct HttpLimits {
  // Bytes of a request body (Content-Length or chunked), else 413. 64 MiB takes what the SDKs send for a reference
  // (a 5 MB phone photo, a few seconds of 1080p video: ~10-40 MB); what an upload costs is bounded apart (each
  // file decoded at most 64 MiB and probed in a limited child, all bodies held at once by max_body_total).
  size_t max_body = 64u << 20;
  size_t max_body_total = 256u << 20;  // body bytes held by all requests together (at least max_body), else 503
  size_t max_header_bytes = 16384;     // request line + headers of one request, else 431 (or 414 for the URL)
  size_t max_headers = 64;             // header fields of one request, else 431
  unsigned max_connections = 4096;     // open connections (idle, slow and streaming ones included)
  unsigned idle_timeout_s = 30;        // a connection that sends or takes nothing for this long is closed
  unsigned max_streams = 512;          // open server-sent-event streams, else 503
  unsigned api_threads = 8;            // threads running API requests (the event loop never blocks on them)
  unsigned submit_threads = 2;         // threads accepting jobs (uploads are decoded and probed here)
  size_t max_pending = 1024;           // API requests waiting for a thread, else 503
};

// Host header rule (see above). `allowed` holds extra names from --allowed-host ("*" allows any).
bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed);

// Cross-site rule for state-changing requests: true when the request may proceed. `origin` and
// `sec_fetch_site` are the header values ("" when absent); `host` is the Host header.
bool same_origin_or_absent(std::string_view origin, std::string_view sec_fetch_site, std::string_view host);

// The media type of a Content-Type value, lower case, without parameters ("application/json").
std::string media_type(std::string_view content_type);

// A Range header against a representation of `size` bytes (RFC 9110 §14.2): `full` serves the whole file with
// 200 (no header, another unit, a syntax error, or several ranges: the server may ignore a Range field and
// does so rather than build multipart/byteranges), `partial` one satisfiable range [first, last] with 206,
// `unsatisfiable` 416 (with `Content-Range: bytes */SIZE`). Numbers too large for 64 bits count as beyond the
// end, never wrap.
struct RangeAnswer {
  enum Kind { full, partial, unsatisfiable } kind = full;
  uint64_t first = 0, last = 0;
};
RangeAnswer parse_range(std::string_view header, uint64_t size);

// Constant-time comparison of a presented key with the server's (false when the server's is empty).
bool key_matches(std::string_view presented, std::string_view key);

}  // namespace h3::serve

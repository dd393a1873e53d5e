// The routes of `h3 serve` as plain data, independent of the HTTP library (serve/http.cpp runs them): each
// names its method and path pattern, the body content types it takes, where it runs and whether it needs the
// API key. A handler reads an HttpRequest and fills an HttpResponse; it throws ApiError for a client error.
//
// Where a route runs: `event` on the event loop (must never block: /health, the page), `api` on the API thread
// pool (store reads and writes), `submit` on the small pool that accepts jobs (body parsing, upload decoding and
// media probing, which may take seconds).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "serve/supervisor.h"

namespace h3::serve {

struct HttpRequest {
  std::string method, path;
  std::multimap<std::string, std::string> query;             // decoded query arguments
  std::vector<std::pair<std::string, std::string>> headers;  // names in lower case, in order
  std::string body;
  std::vector<std::string> matches;  // the path pattern's groups

  // The first value of a header (lower-case name), "" when absent.
  const std::string& header(const std::string& name) const;
  bool has_param(const std::string& k) const { return query.count(k) > 0; }
  std::string param(const std::string& k) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // A file answer instead of `body`: [file_offset, file_offset + file_length) of `file_fd` (owned).
  int file_fd = -1;
  uint64_t file_offset = 0, file_length = 0;
  // A server-sent-event stream instead of `body`: every event (stream_job empty) or one job's.
  bool stream = false;
  std::string stream_job;
  uint64_t stream_after = 0;  // (set by the front) the stream continues after this event
  bool stream_ended = false;  // (set by the front) the body is the whole stream (the job already ended)

  void json(const nlohmann::json& j, int code = 200);
  void error(int code, const std::string& error_code, const std::string& message);
};

// The JSON error body every 4xx/5xx carries (docs/api.md "Errors").
std::string error_body(int status, const std::string& code, const std::string& message);

struct Route {
  enum class Where { event, api, submit };
  std::string method;
  std::string pattern;  // the path; each "{}" stands for one non-empty segment without '/' (route_matches)
  std::function<void(const HttpRequest&, HttpResponse&)> handler;
  Where where = Where::api;
  bool public_route = false;            // answered without the API key (/ and /health)
  std::vector<std::string> body_types;  // media types a body may have (empty: the route takes no body)
};

// True when `path` fits `pattern` ("/v1/videos/{}/cancel"); the segments standing for "{}" go to `groups`.
// Linear in the path (no regular expression: a path is as long as the client makes it).
bool route_matches(std::string_view pattern, std::string_view path, std::vector<std::string>& groups);

// Every route of the API (docs/api.md), bound to `sup`.
std::vector<Route> make_routes(Supervisor& sup);

}  // namespace h3::serve

// The routes of `h3 serve` (serve/http_routes.h; docs/api.md documents each).
#include "serve/http_routes.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "core/error.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "serve/http.h"
#include "serve/http_policy.h"
#include "serve/multipart.h"
#include "serve/previews.h"

namespace h3::serve {

namespace {

// Request bodies nest 3 levels (references[i].data); 32 leaves room and refuses bombs before parsing.
constexpr int kMaxRequestDepth = 32;
// A request holds a few dozen values (fields, 16 LoRAs, references); 10,000 refuses `[{},{},...]` of --max-body
// bytes before it costs gigabytes (each empty object is an allocation), while any real request passes.
constexpr size_t kMaxRequestValues = 10000;

const char* kPageCsp =
    "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; "
    "media-src blob:; img-src data: blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

}  // namespace

const std::string& HttpRequest::header(const std::string& name) const {
  static const std::string none;
  for (const auto& [k, v] : headers)
    if (k == name) return v;
  return none;
}

std::string HttpRequest::param(const std::string& k) const {
  auto it = query.find(k);
  return it == query.end() ? std::string() : it->second;
}

std::string error_body(int status, const std::string& code, const std::string& message) {
  const char* type = status == 401   ? "authentication_error"
                     : status == 404 ? "not_found_error"
                     : status == 429 ? "rate_limit_error"
                     : status >= 500 ? "server_error"
                                     : "invalid_request_error";
  return dump_json({{"error", {{"message", message}, {"type", type}, {"param", nullptr}, {"code", code}}}});
}

void HttpResponse::json(const nlohmann::json& j, int code) {
  status = code;
  content_type = "application/json";
  body = dump_json(j);
}

void HttpResponse::error(int code, const std::string& error_code, const std::string& message) {
  status = code;
  content_type = "application/json";
  body = error_body(code, error_code, message);
}

namespace {

void list(Supervisor& sup, const HttpRequest& req, HttpResponse& res) {
  int64_t limit = 20;
  if (req.has_param("limit")) {
    const std::string v = req.param("limit");
    if (v.empty() || v.size() > 4 || v.find_first_not_of("0123456789") != std::string::npos || std::stoll(v) < 1 ||
        std::stoll(v) > 100)
      throw ApiError{400, "invalid_request", "'limit' must be an integer 1 .. 100"};
    limit = std::stoll(v);
  }
  bool desc = true;
  if (req.has_param("order")) {
    const std::string v = req.param("order");
    if (v != "asc" && v != "desc") throw ApiError{400, "invalid_request", "'order' must be asc or desc"};
    desc = v == "desc";
  }
  std::string status;
  if (req.has_param("status")) {
    status = req.param("status");
    if (status != kQueued && status != kRunning && status != kCompleted && status != kFailed && status != kCancelled)
      throw ApiError{400, "invalid_request", "'status' must be queued, in_progress, completed, failed or cancelled"};
  }
  std::optional<int64_t> after;
  if (req.has_param("after")) {
    const std::string v = req.param("after");
    if (!valid_job_id(v)) throw ApiError{400, "invalid_request", "'after' must be a video id"};
    after = sup.get(v).seq;
  }
  auto rows = sup.list(limit + 1, after, desc, status);
  const bool more = static_cast<int64_t>(rows.size()) > limit;
  if (more) rows.pop_back();
  nlohmann::json data = nlohmann::json::array();
  for (const auto& r : rows) data.push_back(sup.job_json(r));
  res.json({{"object", "list"},
            {"data", data},
            {"first_id", rows.empty() ? nlohmann::json() : nlohmann::json(rows.front().id)},
            {"last_id", rows.empty() ? nlohmann::json() : nlohmann::json(rows.back().id)},
            {"has_more", more}});
}

// The MP4 (video `index` of the job), a picture made from it (variant thumbnail / spritesheet, serve/previews.h), or
// the job's latest preview while it denoises (variant preview).
void content(Supervisor& sup, const HttpRequest& req, HttpResponse& res) {
  // A delete waits until the file is open (JobStore::hold_files): one that came first leaves no row (404 here).
  const auto hold = sup.store().hold_files(req.matches.at(0));
  JobRecord r = sup.get(req.matches.at(0));
  const std::string variant = req.has_param("variant") ? req.param("variant") : "video";
  if (variant != "video" && variant != "thumbnail" && variant != "spritesheet" && variant != "preview")
    throw ApiError{400, "invalid_request", "'variant' must be video, thumbnail, spritesheet or preview"};
  int index = 0;
  if (req.has_param("index")) {
    const std::string v = req.param("index");
    if (v.empty() || v.size() > 2 || v.find_first_not_of("0123456789") != std::string::npos || std::stoi(v) >= r.n())
      throw ApiError{400, "invalid_request",
                     fmt::format("'index' must be a video of this job, 0 .. {} (it has n = {})", r.n() - 1, r.n())};
    index = std::stoi(v);
  }
  // The path comes from the store and the server's own id, never from the request.
  std::string path = sup.store().output_path(r.id, index);
  if (variant == "preview") {
    path = sup.store().preview_path(r.id);
    if (!std::filesystem::is_regular_file(path))
      throw ApiError{404, "no_preview",
                     fmt::format("no preview of this video yet (the job is {}; one is made every --preview-every DiT "
                                 "calls while it denoises)",
                                 r.status)};
  } else if (!r.video_ready(index)) {
    throw ApiError{409, "not_ready",
                   r.n() > 1 ? fmt::format("video {} of this job is not made yet (the job is {})", index, r.status)
                             : fmt::format("the video is {}; content exists once it is completed", r.status)};
  }
  if (variant != "video" && variant != "preview" && std::filesystem::is_regular_file(path)) {
    try {
      path =
          ensure_preview(path, variant, r.resolved.value("width", int64_t{0}), r.resolved.value("height", int64_t{0}));
    } catch (const std::exception& e) {
      spdlog::warn("serve: the {} of {}: {}", variant, r.id, e.what());
      throw ApiError{500, "preview_failed", fmt::format("the {} could not be made from the video", variant)};
    }
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    if (fd >= 0) ::close(fd);
    throw ApiError{410, "gone", "the video file is missing from the store"};
  }
  const auto size = static_cast<uint64_t>(st.st_size);
  res.content_type = variant == "video" ? "video/mp4" : "image/png";
  const std::string name = index == 0 ? r.id : fmt::format("{}-{}", r.id, index);
  res.headers.emplace_back("Content-Disposition", "inline; filename=\"" + (variant == "preview" ? r.id : name) +
                                                      (variant == "video" ? ".mp4" : "." + variant + ".png") + "\"");
  res.headers.emplace_back("Accept-Ranges", "bytes");
  res.file_fd = fd;
  res.file_offset = 0;
  res.file_length = size;
  // A Range with If-Range is ignored: the server sends no validators, so no If-Range can match (RFC 9110 §13.1.5).
  const std::string& range = req.header("range");
  if (range.empty() || !req.header("if-range").empty()) return;
  const RangeAnswer a = parse_range(range, size);
  if (a.kind == RangeAnswer::partial) {
    res.status = 206;
    res.file_offset = a.first;
    res.file_length = a.last - a.first + 1;
    res.headers.emplace_back("Content-Range", fmt::format("bytes {}-{}/{}", a.first, a.last, size));
  } else if (a.kind == RangeAnswer::unsatisfiable) {
    ::close(fd);
    res.file_fd = -1;
    res.error(416, "range_not_satisfiable",
              fmt::format("the range '{}' lies outside the {} bytes of the video", range.substr(0, 100), size));
    res.headers.emplace_back("Content-Range", fmt::format("bytes */{}", size));
  }
}

}  // namespace

bool route_matches(std::string_view pattern, std::string_view path, std::vector<std::string>& groups) {
  groups.clear();
  size_t p = 0, q = 0;
  while (p < pattern.size()) {
    if (pattern.compare(p, 2, "{}") == 0) {
      const size_t end = std::min(path.find('/', q), path.size());
      if (end == q) return false;  // an empty segment
      groups.emplace_back(path.substr(q, end - q));
      p += 2;
      q = end;
      continue;
    }
    if (q >= path.size() || pattern[p] != path[q]) return false;
    ++p;
    ++q;
  }
  return q == path.size();
}

std::vector<Route> make_routes(Supervisor& sup) {
  using W = Route::Where;
  const std::vector<std::string> json_body = {"application/json"};
  std::vector<Route> r;
  auto add = [&](const char* method, const char* pattern, W where,
                 std::function<void(const HttpRequest&, HttpResponse&)> fn, std::vector<std::string> types = {},
                 bool is_public = false) {
    r.push_back(Route{method, pattern, std::move(fn), where, is_public, std::move(types)});
  };
  add(
      "GET", "/", W::event,
      [](const HttpRequest&, HttpResponse& res) {
        res.headers.emplace_back("Content-Security-Policy", kPageCsp);
        res.content_type = "text/html; charset=utf-8";
        res.body = web_page_html();
      },
      {}, true);
  add(
      "GET", "/health", W::event,
      [&sup](const HttpRequest&, HttpResponse& res) {
        nlohmann::json h = sup.health();
        // Answered without the key: with --api-key set, whether a job runs, not which one.
        if (!sup.options().api_key.empty() && !h["running"].is_null()) h["running"] = true;
        res.json(h, sup.ready() ? 200 : 503);
      },
      {}, true);
  add("GET", "/metrics", W::api, [&sup](const HttpRequest&, HttpResponse& res) {
    res.content_type = "text/plain; version=0.0.4; charset=utf-8";
    res.body = sup.metrics();
  });
  add("GET", "/v1/models", W::api, [&sup](const HttpRequest&, HttpResponse& res) { res.json(sup.models()); });
  // JSON, or multipart/form-data: what the OpenAI SDKs send (serve/multipart.h). Both are bounded by --max-body
  // before they get here; a form is the Origin-checked kind of body the front allows (serve/http_policy.h).
  add("POST", "/v1/videos", W::submit,
      [&sup](const HttpRequest& req, HttpResponse& res) {
        const std::string& type = req.header("content-type");
        nlohmann::json body;
        if (media_type(type) == "multipart/form-data") {
          body = form_to_request(parse_multipart(req.body, multipart_boundary(type)));
        } else {
          if (req.body.empty()) throw ApiError{400, "invalid_request", "the body must be a JSON object"};
          try {
            body = parse_json_bounded(req.body, "the body", kMaxRequestDepth, true, kMaxRequestValues);
          } catch (const Error& e) {
            throw ApiError{400, "invalid_json", e.what()};
          }
        }
        JobRecord rec = sup.submit(body);
        res.headers.emplace_back("Location", "/v1/videos/" + rec.id);
        res.json(sup.job_json(rec), 202);
      },
      {"application/json", "multipart/form-data"});
  add("GET", "/v1/videos", W::api, [&sup](const HttpRequest& req, HttpResponse& res) { list(sup, req, res); });
  add("GET", "/v1/videos/{}", W::api,
      [&sup](const HttpRequest& req, HttpResponse& res) { res.json(sup.job_json(sup.get(req.matches.at(0)))); });
  add("DELETE", "/v1/videos/{}", W::api, [&sup](const HttpRequest& req, HttpResponse& res) {
    const std::string id = req.matches.at(0);
    sup.remove(id);
    res.json({{"id", id}, {"object", "video.deleted"}, {"deleted", true}});
  });
  add(
      "POST", "/v1/videos/{}/cancel", W::api,
      [&sup](const HttpRequest& req, HttpResponse& res) { res.json(sup.job_json(sup.cancel(req.matches.at(0)))); },
      json_body);
  add("GET", "/v1/videos/{}/content", W::api,
      [&sup](const HttpRequest& req, HttpResponse& res) { content(sup, req, res); });
  add("GET", "/v1/videos/{}/events", W::api, [&sup](const HttpRequest& req, HttpResponse& res) {
    res.stream = true;
    res.stream_job = sup.get(req.matches.at(0)).id;
  });
  add("GET", "/v1/events", W::event, [](const HttpRequest&, HttpResponse& res) { res.stream = true; });
  return r;
}

}  // namespace h3::serve

// Media uploads of POST /v1/videos (fl2va keyframes, ref2va references; docs/api.md "Keyframes and
// references"): base64 JSON fields, decoded and stored by the server under <store>/uploads/<random>/, so the
// engine only ever reads files the server wrote itself. A client-given path is refused.
//
//   "first_image" / "last_image": {"data": BASE64, "filename": "key.png"}
//   "references": [{"kind": "image" | "video" | "audio", "data": BASE64, "filename": "ref.mp4"}, ...]
//
// The filename only contributes its extension (letters and digits, up to 5) as a hint to the demuxer; the
// content decides what the file is. Each decoded file is at most `max_file_bytes`.
#pragma once
#include <cstddef>
#include <nlohmann/json.hpp>
#include <string>

namespace h3::serve {

inline constexpr size_t kMaxUploadBytes = 64u << 20;

// True when `key` is one of the media fields above.
bool is_media_field(const std::string& key);

// Decodes and stores every media field of `body`: `gen` (the GenerateRequest JSON) gets the stored paths,
// `accepted` (what the job record keeps) a summary without the data. Returns the upload folder ("" when the
// body has no media). Throws ApiError (400) naming the field on malformed input; nothing is left on disk
// then.
std::string store_uploads(const nlohmann::json& body, nlohmann::json& gen, nlohmann::json& accepted,
                          const std::string& store_dir, size_t max_file_bytes = kMaxUploadBytes);

// Removes an upload folder made by store_uploads (no error when it is gone).
void remove_uploads(const std::string& dir);
// Removes the upload folders a job's resolved parameters (`media[].path`) point at, and only folders directly
// under STORE/uploads/ (called when the job is deleted).
void remove_job_uploads(const nlohmann::json& resolved, const std::string& store_dir);

}  // namespace h3::serve

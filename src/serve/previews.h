// Pictures made from a finished job's MP4 for `GET /v1/videos/{id}/content?variant=thumbnail|spritesheet` (the
// OpenAI video API's variants): the poster (the first frame, at most kThumbnailWidth wide) and a sprite sheet
// (one frame per second, up to 16, in rows of 4 tiles kTileWidth wide). Both are PNG files beside the MP4,
// made on first request and kept until the job is deleted.
#pragma once
#include <cstdint>
#include <string>

namespace h3::serve {

inline constexpr int64_t kThumbnailWidth = 480;
inline constexpr int64_t kTileWidth = 240;
inline constexpr int kSheetColumns = 4, kSheetTiles = 16;

// "thumbnail" or "spritesheet" (anything else throws h3::Error).
std::string preview_path(const std::string& mp4_path, const std::string& variant);

// Makes the preview of `mp4_path` (a video of width x height pixels) at preview_path() unless it exists; one
// preview is made at a time (decoding is a CPU burst). Throws h3::Error when the MP4 cannot be decoded.
std::string ensure_preview(const std::string& mp4_path, const std::string& variant, int64_t width, int64_t height);

}  // namespace h3::serve

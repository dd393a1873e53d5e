// MediaInfo as JSON (media/media_read.h): what a media probe run in another process hands back. Built with and
// without FFmpeg (it decodes nothing).
#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "media/media_read.h"

namespace h3 {

// MediaInfo <-> JSON, field for field under the same names; every field must be present.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE(MediaInfo, path, has_video, has_audio, still, width, height, frames, audio_samples,
                                   video_codec, audio_codec, format, truncated, warnings)

std::string media_info_to_json(const MediaInfo& i) {
  return nlohmann::json(i).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

MediaInfo media_info_from_json(const std::string& text) {
  const nlohmann::json j = parse_json_bounded(text, "media probe answer", 4);
  try {
    return j.get<MediaInfo>();
  } catch (const nlohmann::json::exception& e) {
    fail("media probe answer: {}", e.what());
  }
}

}  // namespace h3

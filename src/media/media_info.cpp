// MediaInfo as JSON (media/media_read.h): what a media probe run in another process hands back. Built with and
// without FFmpeg (it decodes nothing).
#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "media/media_read.h"

namespace h3 {

std::string media_info_to_json(const MediaInfo& i) {
  return nlohmann::json{{"path", i.path},
                        {"has_video", i.has_video},
                        {"has_audio", i.has_audio},
                        {"still", i.still},
                        {"width", i.width},
                        {"height", i.height},
                        {"frames", i.frames},
                        {"audio_samples", i.audio_samples},
                        {"video_codec", i.video_codec},
                        {"audio_codec", i.audio_codec},
                        {"format", i.format},
                        {"truncated", i.truncated},
                        {"warnings", i.warnings}}
      .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

MediaInfo media_info_from_json(const std::string& text) {
  const nlohmann::json j = parse_json_bounded(text, "media probe answer", 4);
  MediaInfo i;
  try {
    i.path = j.at("path").get<std::string>();
    i.has_video = j.at("has_video").get<bool>();
    i.has_audio = j.at("has_audio").get<bool>();
    i.still = j.at("still").get<bool>();
    i.width = j.at("width").get<int64_t>();
    i.height = j.at("height").get<int64_t>();
    i.frames = j.at("frames").get<int64_t>();
    i.audio_samples = j.at("audio_samples").get<int64_t>();
    i.video_codec = j.at("video_codec").get<std::string>();
    i.audio_codec = j.at("audio_codec").get<std::string>();
    i.format = j.at("format").get<std::string>();
    i.truncated = j.at("truncated").get<bool>();
    i.warnings = j.at("warnings").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception& e) {
    fail("media probe answer: {}", e.what());
  }
  return i;
}

}  // namespace h3

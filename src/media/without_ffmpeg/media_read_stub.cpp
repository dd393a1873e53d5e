// Stand-ins for media input (media/media_read.h) when FFmpeg's libraries were not found at configure time:
// keyframes and references cannot be read, and say how to get the libraries.
#include "core/error.h"
#include "media/media_read.h"

namespace h3 {
namespace {
[[noreturn]] void no_media_input(const std::string& path) {
  fail(
      "cannot read {}: this h3 was built without FFmpeg's libraries (libavformat, libavcodec, libavutil, "
      "libswscale, libswresample), so keyframes and references are unavailable; install them "
      "(scripts/setup.sh installs the Debian packages) and rebuild",
      path);
}
}  // namespace

MediaInfo scan_media(const std::string& path, int, int, int64_t, int64_t) {
  no_media_input(path);
}
Tensor read_picture(const std::string& path, int64_t, int64_t, FitMode) {
  no_media_input(path);
}
Tensor read_video_frames(const std::string& path, int, int64_t, int64_t, int64_t) {
  no_media_input(path);
}
Tensor read_audio(const std::string& path, int, int64_t) {
  no_media_input(path);
}

}  // namespace h3

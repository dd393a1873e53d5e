// Stand-ins for the media writers when FFmpeg's libraries were not found at configure time (for example on a GPU
// machine that only runs the model): every entry point fails with the same message saying how to get them.
#include <stdexcept>

#include "core/error.h"
#include "media/mp4_writer.h"

namespace h3 {
namespace {
[[noreturn]] void no_media(const char* what) {
  throw Error(std::string(what) +
              ": this h3 was built without FFmpeg's libraries (libavformat, libavcodec, libavutil, libswscale, "
              "libswresample); install them (scripts/setup.sh installs the Debian packages) and rebuild");
}
}  // namespace

struct Mp4Writer::Impl {};
Mp4Writer::Mp4Writer(const std::string& path, const MediaSpec&) : path_(path) {
  no_media("mp4 output");
}
Mp4Writer::~Mp4Writer() = default;
bool Mp4Writer::add_frames(const Tensor&, const std::function<bool()>&) {
  no_media("mp4 output");
}
void Mp4Writer::add_audio(const Tensor&) {
  no_media("mp4 output");
}
void Mp4Writer::finish() {
  no_media("mp4 output");
}
int64_t Mp4Writer::frames_written() const {
  return 0;
}
int64_t Mp4Writer::samples_written() const {
  return 0;
}
std::string media_library_versions() {
  return "";
}
void write_wav(const std::string&, const Tensor&, int) {
  no_media("wav output");
}
std::vector<std::string> write_png_frames(const std::string&, const Tensor&) {
  no_media("png output");
}
void write_png(const std::string&, const Tensor&) {
  no_media("png output");
}

}  // namespace h3

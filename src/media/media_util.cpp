#include "media/media_util.h"

extern "C" {
#include <libavutil/error.h>
}

#include <cmath>
#include <filesystem>
#include <system_error>

#include "core/files.h"

namespace h3::media {

namespace fs = std::filesystem;

PartialFile::PartialFile(std::string final_path) : final_(std::move(final_path)), partial_(final_ + ".partial") {
  check_output_file(final_, "output");
}

PartialFile::~PartialFile() {
  if (!committed_) discard();
}

void PartialFile::discard() noexcept {
  std::error_code ec;
  fs::remove(partial_, ec);
}

void PartialFile::commit() {
  H3_ASSERT(!committed_, "commit() twice on {}", final_);
  check_output_file(final_, "output");  // again: the path may have become a device or FIFO meanwhile
  std::error_code ec;
  fs::rename(partial_, final_, ec);
  if (ec)
    fail(
        "cannot rename {} onto {}: {}; check that the destination is a writable file path on the same "
        "file system",
        partial_, final_, ec.message());
  committed_ = true;
}

void check_output_path(const std::string& path, const char* what) {
  H3_CHECK(!path.empty(), "{} output: empty path; give a file name", what);
  std::error_code ec;
  H3_CHECK(!fs::is_directory(path, ec), "{} output {} is a directory; give a file name inside it", what, path);
  check_output_file(path, std::string(what) + " output");
  const fs::path parent = fs::path(path).parent_path();
  if (!parent.empty())
    H3_CHECK(fs::is_directory(parent, ec), "{} output {}: folder {} does not exist; create it first", what, path,
             parent.string());
}

std::string av_error_text(int code) {
  char buf[AV_ERROR_MAX_STRING_SIZE] = {};
  if (av_strerror(code, buf, sizeof(buf)) < 0) return "libav error " + std::to_string(code);
  return buf;
}

namespace {

float clamp01(double v) {
  return std::isnan(v) ? 0.0f : static_cast<float>(std::min(1.0, std::max(0.0, v)));
}
float clamp11(double v) {
  return std::isnan(v) ? 0.0f : static_cast<float>(std::min(1.0, std::max(-1.0, v)));
}

void check_host_float(const Tensor& t, const std::string& where, const char* what) {
  H3_CHECK(t.device() == Device::cpu, "{}: {} must be in host memory (got a device tensor)", where, what);
  H3_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64,
           "{}: {} must be f32 or f64, got {}; convert with Tensor::to(DType::f32)", where, what, t.describe());
}

}  // namespace

PixelView pixel_view(const Tensor& pixels, const std::string& where) {
  check_host_float(pixels, where, "pixels");
  const Shape& s = pixels.shape();
  const bool batched = s.size() == 5 && s[0] == 1;
  H3_CHECK((s.size() == 4 || batched) && s[batched ? 1 : 0] == 3,
           "{}: pixels must be [3, T, H, W] (RGB planes, the video VAE's to_pixels01 layout), got {}", where,
           pixels.describe());
  PixelView v;
  const size_t o = batched ? 1 : 0;
  v.frames = s[o + 1];
  v.height = s[o + 2];
  v.width = s[o + 3];
  if (pixels.dtype() == DType::f32)
    v.f32 = pixels.data<float>();
  else
    v.f64 = pixels.data<double>();
  return v;
}

float PixelView::at(int c, int64_t f, int64_t y, int64_t x) const {
  const int64_t i = ((c * frames + f) * height + y) * width + x;
  return clamp01(f32 ? static_cast<double>(f32[i]) : f64[i]);
}

void PixelView::rgb24(int64_t f, uint8_t* out, int64_t stride) const {
  for (int64_t y = 0; y < height; ++y) {
    uint8_t* row = out + y * stride;
    for (int64_t x = 0; x < width; ++x)
      for (int c = 0; c < 3; ++c) row[3 * x + c] = static_cast<uint8_t>(std::lround(at(c, f, y, x) * 255.0f));
  }
}

WaveView wave_view(const Tensor& wave, const std::string& where) {
  check_host_float(wave, where, "wave");
  const Shape& s = wave.shape();
  const bool ok = s.size() == 2 || (s.size() == 3 && s[1] == 1);
  H3_CHECK(ok && s[0] >= 1, "{}: wave must be [channels, N] (or the audio VAE's [channels, 1, N]), got {}", where,
           wave.describe());
  WaveView v;
  v.channels = s[0];
  v.samples = s.back();
  if (wave.dtype() == DType::f32)
    v.f32 = wave.data<float>();
  else
    v.f64 = wave.data<double>();
  return v;
}

float WaveView::at(int64_t c, int64_t i) const {
  const int64_t k = c * samples + i;
  return clamp11(f32 ? static_cast<double>(f32[k]) : f64[k]);
}

}  // namespace h3::media

// Poster and sprite sheet of a finished video (serve/previews.h).
#include "serve/previews.h"

#include <algorithm>
#include <filesystem>
#include <mutex>

#include "core/error.h"
#include "core/tensor.h"
#include "media/media_read.h"
#include "media/mp4_writer.h"

namespace h3::serve {

namespace {

// Width w scaled to `target` (never up), the height keeping the aspect; both even and at least 2.
std::pair<int64_t, int64_t> fit_width(int64_t w, int64_t h, int64_t target) {
  const int64_t tw = std::max<int64_t>(2, std::min(w, target) / 2 * 2);
  const int64_t th = std::max<int64_t>(2, (tw * h + w / 2) / w / 2 * 2);
  return {tw, th};
}

}  // namespace

std::string preview_path(const std::string& mp4_path, const std::string& variant) {
  H3_CHECK(variant == "thumbnail" || variant == "spritesheet", "preview: unknown variant {}", variant);
  return std::filesystem::path(mp4_path).replace_extension("." + variant + ".png").string();
}

std::string ensure_preview(const std::string& mp4_path, const std::string& variant, int64_t width, int64_t height) {
  static std::mutex one_at_a_time;
  const std::string out = preview_path(mp4_path, variant);
  std::lock_guard lock(one_at_a_time);
  if (std::filesystem::is_regular_file(out)) return out;
  H3_CHECK(width > 0 && height > 0, "preview of {}: unknown video size", mp4_path);
  if (variant == "thumbnail") {
    const auto [tw, th] = fit_width(width, height, kThumbnailWidth);
    write_png(out, read_picture(mp4_path, tw, th, FitMode::stretch));
    return out;
  }
  // One frame per second from the start, each stretched to a tile; unused cells of the last row stay black.
  const auto [tw, th] = fit_width(width, height, kTileWidth);
  const Tensor frames = read_video_frames(mp4_path, 1, kSheetTiles, tw, th);  // [3, F, th, tw]
  H3_CHECK(frames.ndim() == 4 && frames.dim(1) > 0, "preview of {}: no frames decoded", mp4_path);
  const int64_t n = frames.dim(1), cols = std::min<int64_t>(kSheetColumns, n), rows = (n + cols - 1) / cols;
  Tensor sheet(DType::f32, {3, rows * th, cols * tw});
  const float* src = frames.data<float>();
  float* dst = sheet.data<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t f = 0; f < n; ++f)
      for (int64_t y = 0; y < th; ++y)
        std::copy_n(src + ((c * n + f) * th + y) * tw, tw,
                    dst + (c * rows * th + f / cols * th + y) * (cols * tw) + f % cols * tw);
  write_png(out, sheet);
  return out;
}

}  // namespace h3::serve

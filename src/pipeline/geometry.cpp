#include "pipeline/geometry.h"

#include <cmath>

#include "core/error.h"

namespace h3 {

int64_t align_num_frames(int64_t num_frames) {
  H3_CHECK(num_frames >= 1, "num_frames must be positive, got {}", num_frames);
  int64_t over = (num_frames - kLatentsPerChunk) % kFramesPerChunk;
  if (over < 0) over += kFramesPerChunk;
  return over == 0 ? num_frames : num_frames + (kFramesPerChunk - over);
}

int64_t video_latent_frames(int64_t aligned_frames) {
  H3_CHECK(aligned_frames >= kLatentsPerChunk && (aligned_frames - kLatentsPerChunk) % kFramesPerChunk == 0,
           "frame count {} is not of the form 17n+5 (align it first: e.g. 124, 141, 243)", aligned_frames);
  return (aligned_frames - kLatentsPerChunk) / kFramesPerChunk * kLatentsPerChunk + 2;
}

int64_t audio_latents_per_channel(int64_t frames) {
  H3_CHECK(frames >= 1, "audio length needs a positive frame count, got {}", frames);
  // Same operation order as the reference (divide by fps first, then scale) so the value before rounding is
  // the same double; nearbyint in the default rounding mode breaks ties to even like Python's round().
  double latents =
      static_cast<double>(frames) / static_cast<double>(kFps) * static_cast<double>(kAudioLatentsPerSecond);
  return static_cast<int64_t>(std::nearbyint(latents));
}

void check_canvas(int64_t height, int64_t width) {
  H3_CHECK(height > 0 && height % kCanvasMultiple == 0,
           "canvas height {} is not allowed: it must be a positive multiple of {} (VAE stride 16 x patch 2)", height,
           kCanvasMultiple);
  H3_CHECK(width > 0 && width % kCanvasMultiple == 0,
           "canvas width {} is not allowed: it must be a positive multiple of {} (VAE stride 16 x patch 2)", width,
           kCanvasMultiple);
}

void check_request_duration(int64_t aligned_frames) {
  H3_CHECK(aligned_frames >= kMinRequestFrames && aligned_frames <= kMaxRequestFrames,
           "aligned frame count {} ({:.3f} s at {} fps) is outside the supported {}..{} frames (5-15 s)",
           aligned_frames, static_cast<double>(aligned_frames) / kFps, kFps, kMinRequestFrames, kMaxRequestFrames);
}

CanvasSize resolve_canvas_size(double aspect_w, double aspect_h) {
  H3_CHECK(aspect_w > 0 && aspect_h > 0, "aspect ratio must be positive, got {}:{}", aspect_w, aspect_h);
  double ratio = aspect_w / aspect_h;
  H3_CHECK(ratio >= 0.25 && ratio <= 4.0, "aspect ratio {}:{} ({:g}) is outside the supported 1:4 .. 4:1", aspect_w,
           aspect_h, ratio);
  double short_edge = static_cast<double>(kShortEdge);
  double w = ratio >= 1.0 ? short_edge * ratio : short_edge;
  double h = ratio >= 1.0 ? short_edge : short_edge / ratio;
  double area = w * h;
  if (area > static_cast<double>(kMaxCanvasPixels)) {
    // pow(x, 0.5) rather than sqrt: the reference writes `** 0.5`.
    double scale = std::pow(static_cast<double>(kMaxCanvasPixels) / area, 0.5);
    w *= scale;
    h *= scale;
  }
  auto snap = [](double v) {
    double m = static_cast<double>(kCanvasMultiple);
    int64_t n = static_cast<int64_t>(std::nearbyint(v / m));  // ties to even, as Python's round()
    return n < 1 ? kCanvasMultiple : n * kCanvasMultiple;
  };
  return {snap(h), snap(w)};
}

Geometry make_geometry(int64_t num_frames, int64_t height, int64_t width) {
  check_canvas(height, width);
  Geometry g;
  g.frames = align_num_frames(num_frames);
  g.height = height;
  g.width = width;
  g.latent_frames = video_latent_frames(g.frames);
  g.latent_h = height / kVaeStride;
  g.latent_w = width / kVaeStride;
  g.audio_latents = audio_latents_per_channel(g.frames);
  return g;
}

Geometry make_request_geometry(int64_t num_frames, int64_t height, int64_t width) {
  Geometry g = make_geometry(num_frames, height, width);
  check_request_duration(g.frames);
  return g;
}

}  // namespace h3

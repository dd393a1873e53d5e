// Request geometry: how a frame count and a canvas become latent grid sizes, and which requests the released
// model accepts. Layout building uses the size rules only; the duration window is a request check kept
// separate, because the layout itself is well defined for any aligned frame count (the golden layouts include
// a 107-frame case).
#pragma once
#include <cstdint>

namespace h3 {

inline constexpr int64_t kFps = 24;
inline constexpr int64_t kAudioLatentsPerSecond = 40;
inline constexpr int64_t kFramesPerChunk = 17;  // pixel frames the video VAE encodes per chunk
inline constexpr int64_t kLatentsPerChunk = 5;  // latent frames it keeps per chunk
inline constexpr int64_t kCanvasMultiple = 32;  // VAE stride 16 x patch 2
inline constexpr int64_t kVaeStride = 16;
inline constexpr int64_t kShortEdge = 768;
inline constexpr int64_t kMaxCanvasPixels = 768 * 1344;
inline constexpr int64_t kMinRequestFrames = 124;  // aligned frames of 5 s at 24 fps
inline constexpr int64_t kMaxRequestFrames = 345;  // largest 17n+5 not above 15 s at 24 fps

struct CanvasSize {
  int64_t height = 0;
  int64_t width = 0;
};

// The frame count snapped up to the next 17n+5 (the only lengths the VAE encodes without padding).
int64_t align_num_frames(int64_t num_frames);
// Latent frames 5n+2 of an aligned 17n+5 frame count; throws for any other count.
int64_t video_latent_frames(int64_t aligned_frames);
// Audio latents per stereo channel covering `frames` video frames: round(frames / 24 * 40), ties to even as
// Python's round() does (124 -> 207, 107 -> 178, 243 -> 405).
int64_t audio_latents_per_channel(int64_t frames);
// Throws unless both sides are positive multiples of 32 pixels.
void check_canvas(int64_t height, int64_t width);
// Throws unless the aligned frame count lies in the released 5..15 s window (124..345 frames).
void check_request_duration(int64_t aligned_frames);
// Canvas for a display aspect ratio: short edge 768, area capped at 768x1344, each side rounded to the
// nearest multiple of 32 (at least 32). The ratio must lie in [1/4, 4].
CanvasSize resolve_canvas_size(double aspect_w, double aspect_h);

// Everything the packed layout needs from a (frames, canvas) pair.
struct Geometry {
  int64_t frames = 0;  // aligned pixel frames
  int64_t height = 0, width = 0;
  int64_t latent_frames = 0;  // T
  int64_t latent_h = 0, latent_w = 0;
  int64_t audio_latents = 0;  // A, per channel
};

// Size rules only (no duration window).
Geometry make_geometry(int64_t num_frames, int64_t height, int64_t width);
// make_geometry plus the request duration window.
Geometry make_request_geometry(int64_t num_frames, int64_t height, int64_t width);

}  // namespace h3

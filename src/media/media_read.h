// Media input for keyframes and references (fl2va / ref2va): images (PNG, JPEG, WebP, anything libavformat
// opens as a single picture), videos with an optional soundtrack, and audio files, decoded with libavformat /
// libavcodec, scaled with libswscale (Lanczos) and resampled with libswresample.
//
// Layouts handed to the pipeline:
//   picture  [3, H, W]     f32 RGB in [0, 1] (R, G, B planes), element (c, y, x) at (c * H + y) * W + x
//   frames   [3, F, H, W]  f32 RGB in [0, 1], frame f at 24 fps
//   audio    [C, N]        f32 in [-1, 1], planar, at the requested rate (32 kHz for the audio VAE)
// ImageNet normalisation (what the video VAE encoder takes) is the pipeline's step, not the reader's.
//
// Frame rate: a video is resampled to `fps` by holding frames: output frame k (time k / fps from the first
// decoded frame) shows the last source frame whose timestamp is <= k / fps; the clip lasts until the last
// source frame's end (its timestamp plus one source frame duration). Audio: mono is duplicated onto both
// channels, more than two channels are mixed down to stereo by libswresample.
//
// Errors throw h3::Error naming the file and what to do (missing, not a media file, no picture / no sound,
// a codec this libavcodec lacks, empty streams, damaged data).
//
// Limits (checked on what a file declares before anything is decoded, and again on every decoded frame), so
// that no input costs more than it weighs (docs/api.md "Limits"):
//   pictures and video frames at most kMaxMediaSide pixels a side and kMaxMediaPixels in all; a still
//     picture also at most max(kStillFloorPixels, kStillPixelsPerByte x its file size) pixels (no real image
//     codec packs more; a "decompression bomb" does);
//   audio at kMinSampleRate .. kMaxSampleRate Hz with at most kMaxAudioChannels channels (a 1 Hz stream
//     resampled to 32 kHz would cost 32,000 samples per sample read);
//   durations and timestamps at most kMaxMediaSeconds; declared frame rates at most kMaxFrameRate;
//   a scan decodes at most kMaxScanSourceFrames video frames and stops once it has what was asked for.
// Picture data the decoder reports as damaged (a truncated JPEG, a PNG with a bad checksum) is an error;
// damage inside a video or audio stream is reported in MediaInfo::warnings.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3 {

inline constexpr int64_t kMaxMediaSide = 16384;
inline constexpr int64_t kMaxMediaPixels = 8192 * 8192;
inline constexpr int64_t kStillFloorPixels = 4096 * 4096;
inline constexpr int64_t kStillPixelsPerByte = 1100;  // deflate's ceiling is 1032 bytes per byte
inline constexpr int kMinSampleRate = 1000, kMaxSampleRate = 384000, kMaxAudioChannels = 64;
inline constexpr double kMaxMediaSeconds = 4 * 3600, kMaxFrameRate = 1000;
inline constexpr int64_t kMaxScanSourceFrames = 8192;

// What a file holds, found by decoding it once (cheap next to the models; used to validate a request and fix
// its geometry before any heavy work).
struct MediaInfo {
  std::string path;
  bool has_video = false, has_audio = false;
  bool still = false;             // a single picture (an image file, or a video of one frame)
  int64_t width = 0, height = 0;  // coded size of the pictures
  int64_t frames = 0;             // frames at the scan's fps (holding frames; see above)
  int64_t audio_samples = 0;      // samples per channel at the scan's sample rate
  std::string video_codec, audio_codec, format;
  bool truncated = false;             // the scan stopped at max_frames / max_samples (counts are lower bounds)
  std::vector<std::string> warnings;  // damage the decoders reported in video or audio streams
};
// `max_frames` / `max_samples` (> 0): stop once that many frames / samples are counted (a request never reads
// more than its own duration, so the rest of a long file is not decoded).
MediaInfo scan_media(const std::string& path, int fps = 24, int sample_rate = 32000, int64_t max_frames = 0,
                     int64_t max_samples = 0);
// The same scan as JSON (for a probe run in another process) and back.
std::string media_info_to_json(const MediaInfo& info);
MediaInfo media_info_from_json(const std::string& json);

// How a picture is fitted to a canvas.
enum class FitMode : uint8_t {
  stretch,  // scaled to exactly width x height (aspect not kept)
  cover,    // scaled by max(W/w, H/h) to round(w * s) x round(h * s), then centre-cropped at
            // ((sw - W) / 2, (sh - H) / 2) (integer division)
};

// The first picture of an image (or video) file, fitted to width x height: [3, H, W] f32 in [0, 1].
Tensor read_picture(const std::string& path, int64_t width, int64_t height, FitMode fit);

// Up to `max_frames` frames at `fps`, each stretched to width x height: [3, F, H, W] f32 in [0, 1].
Tensor read_video_frames(const std::string& path, int fps, int64_t max_frames, int64_t width, int64_t height);

// The first audio stream (of an audio or video file) at `sample_rate`, stereo, at most `max_samples` per
// channel (<= 0: all): [2, N] f32. Throws when the file has no audio stream.
Tensor read_audio(const std::string& path, int sample_rate, int64_t max_samples);

}  // namespace h3

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
// a codec this libavcodec lacks, empty streams).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3 {

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
};
MediaInfo scan_media(const std::string& path, int fps = 24, int sample_rate = 32000);

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

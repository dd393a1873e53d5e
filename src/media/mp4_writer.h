// Media output: MP4 (H.264 + AAC through libavformat/libavcodec), WAV and PNG frames.
//
// Layouts (the VAE decoders' outputs, see model/vae/video_vae.h and model/vae/audio_vae.h):
//   pixels [3, T, H, W] f32 (or f64), RGB in [0, 1] (values outside are clamped): VideoVae::to_pixels01()'s
//          output; element (c, t, y, x) at ((c * T + t) * H + y) * W + x; frames are taken in order of t.
//   wave   [channels, N] f32 (or f64) in [-1, 1] (clamped); a mono [1, N] wave goes to every channel of the
//          spec; AudioVae::decode's [channels, 1, N] is accepted as well.
//
// Atomicity: every writer writes to `path + ".partial"` and renames it onto `path` only when the file is
// complete (Mp4Writer::finish(), write_wav(), write_png_frames()); an error or a destroyed unfinished writer
// removes the partial file, so nothing half-written is ever left at `path`. Errors throw h3::Error naming
// what, where and what to do (an unwritable path, an encoder missing from this libavcodec build, odd sizes,
// wrong shapes).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3 {

struct MediaSpec {
  int64_t width = 0, height = 0;  // pixels; both even (yuv420p)
  int fps = 24;
  int sample_rate = 32000;
  int channels = 2;
  // Container metadata (e.g. "comment" holding the resolved request as JSON, plus individual keys).
  std::map<std::string, std::string> metadata;
  int crf = 18;                        // libx264 constant rate factor (0 = lossless .. 51)
  std::string x264_preset = "medium";  // libx264 speed/size trade-off
  // libx264's frames held until the end of the stream (the "tail" after the last frame, docs/notes.md, issue 40):
  // its rate-control look-ahead (-1: the preset's, 40 at medium; fewer frames change the bits), the buffer between its
  // look-ahead thread and the encoding threads (-1: libx264's, B-frames + 1; 0 runs the look-ahead in the encode call
  // and gives the same bits) and its frame threads (0: libx264's, 1.5 a core; each holds a frame, and their count
  // changes the bits slightly).
  int x264_lookahead = -1;
  int x264_sync_lookahead = -1;
  int x264_threads = 0;
  int64_t audio_bitrate = 192000;  // AAC bits per second
};

// MP4: H.264 (libx264, yuv420p, BT.709 limited range) + AAC-LC ("aac", the native encoder), `+faststart`
// (the moov atom is moved before mdat on finish()). Video and audio may be added in any order and any number
// of calls; frames are encoded as they arrive (only the encoder's own look-ahead is held). With channels = 0
// the file has no audio track.
//
// Threads: the video calls (add_frames, finish_video) and add_audio may run on two threads at once, one each (the
// encoders are separate and the muxer is locked); finish() runs after both. The packets reach the file in the
// order of their timestamps whichever thread wrote first (libavformat's interleaving), so the file is the same.
class Mp4Writer {
 public:
  Mp4Writer(const std::string& path, const MediaSpec& spec);
  ~Mp4Writer();  // not finished => the partial file is removed
  Mp4Writer(const Mp4Writer&) = delete;
  Mp4Writer& operator=(const Mp4Writer&) = delete;

  // pixels [3, T, H, W] (see above) with H, W equal to the spec's. `stop` (optional) is asked before each frame;
  // when it answers true nothing more is encoded, the writer is left unusable (destroy it: the partial file goes)
  // and add_frames returns false (a cancelled request stops within one frame's encode).
  bool add_frames(const Tensor& pixels, const std::function<bool()>& stop = {});
  // No more frames: libx264 encodes the frames it still holds (its look-ahead, B-frames and frame threads: ~40
  // frames at the default preset, most of a second of the encode) and they are written. finish() does it when not
  // done; calling it as soon as the last frame is in lets that work overlap whatever comes before finish().
  void finish_video();
  // wave [channels, N] (see above).
  void add_audio(const Tensor& wave);
  // Flushes the encoders (finish_video() if not done), writes the trailer (faststart) and renames the file onto
  // `path`.
  void finish();

  int64_t frames_written() const;
  int64_t samples_written() const;

  // Where the end of the file went: libx264's delayed frames (finish_video(), wherever it ran), the audio still queued
  // and the aac encoder's flush, the trailer (moov) and close.
  struct FinishTimes {
    double video_flush = 0, audio = 0, trailer = 0;
    int64_t video_delayed = 0;  // packets libx264 gave only on the flush
  };
  const FinishTimes& finish_times() const;
  const std::string& path() const { return path_; }

  struct Impl;

 private:
  std::string path_;
  std::unique_ptr<Impl> impl_;
};

// WAV: 16-bit signed PCM, interleaved, little-endian (RIFF/WAVE, format 1); wave [channels, N] in [-1, 1].
void write_wav(const std::string& path, const Tensor& wave, int sample_rate);

// The FFmpeg libraries this build runs with, e.g. "libavcodec 59.37.100, libavformat 59.27.100, libswscale 6.7.100,
// H.264 by libx264", or "" when h3 was built without them (`h3 --version` prints it).
std::string media_library_versions();

// PNG frames (libavcodec's png encoder, 8-bit RGB): `dir_or_pattern` is either a printf-style pattern holding
// one integer conversion (e.g. "out/frame_%05d.png") or a directory (created if missing; frames go to
// dir/frame_00000.png, ...). Frames are numbered from 0. Each file is written atomically. Returns the paths.
std::vector<std::string> write_png_frames(const std::string& dir_or_pattern, const Tensor& pixels);
// One picture [3, H, W] (or [3, 1, H, W]) in the layout above as a PNG file, written atomically.
void write_png(const std::string& path, const Tensor& picture);

}  // namespace h3

// The MP4's tail (issue 40): what the streamed writer (pipeline/streaming_mp4.h) still does after the last decoded
// frame. A synthetic clip of the pipeline's size (default 768p landscape, 1344 x 768, 124 frames at 24 fps; the
// soundtrack 124 / 24 s of stereo at 32 kHz) goes to StreamingMp4 in chunks, the way the GPU decode hands them over:
// the frames in the decoder's normalized space, to_pixels01 on the writer thread, a pause per chunk standing for the
// GPU's decode of it (--gpu-seconds over the whole clip). Then the caller's part is timed as the pipeline does it:
// end_video() right after the last chunk, then --audio-seconds standing for the audio decode, then finish() with the
// soundtrack (--late-end: no end_video(), libx264 learns of the end in finish(), as before issue 40).
// Prints a table (and one JSON line a run with --json): the worker's times (to_pixels01, the RGB -> YUV conversion
// with libx264's encode, libx264's delayed frames after the end), finish()'s audio encode, its wait for the worker
// and its rest (the trailer), and the time from the last frame handed over to the finished file.
//
//   build/bin/mp4_tail [--width W] [--height H] [--frames T] [--chunk F] [--gpu-seconds S] [--audio-seconds S]
//                      [--late-end] [--lookahead N] [--sync-lookahead N] [--threads N] [--runs N] [--out FILE] [--json]
// --lookahead, --sync-lookahead, --threads: libx264's held frames (MediaSpec's x264_* fields; default: MediaSpec's).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "core/tensor.h"
#include "model/vae/video_vae.h"
#include "pipeline/streaming_mp4.h"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Frames t0..t0+n of a moving scene in the decoder's output space (to_pixels01 maps it to [0, 1]): smooth colour
// gradients drifting over time, a moving disc, and a little per-pixel texture, so that libx264 sees motion and detail
// without the cost of pure noise (a model's frames are natural video, not noise).
h3::Tensor scene(int64_t t0, int64_t n, int64_t H, int64_t W) {
  static const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
  h3::Tensor x(h3::DType::f32, {3, n, H, W});
  float* p = x.data<float>();
  uint32_t rng = 12345u + static_cast<uint32_t>(t0);
  for (int64_t t = 0; t < n; ++t) {
    const double ft = static_cast<double>(t0 + t);
    const double cx = W * (0.3 + 0.4 * std::sin(ft * 0.05)), cy = H * (0.5 + 0.3 * std::cos(ft * 0.07));
    for (int64_t y = 0; y < H; ++y)
      for (int64_t xx = 0; xx < W; ++xx) {
        rng = rng * 1664525u + 1013904223u;
        const double tex = ((rng >> 24) / 255.0 - 0.5) * 0.04;
        const double dx = xx - cx, dy = y - cy;
        const double disc = dx * dx + dy * dy < (H * H) / 25.0 ? 0.35 : 0.0;
        for (int64_t c = 0; c < 3; ++c) {
          const double v = 0.5 + 0.3 * std::sin((xx + 2.0 * ft) * (0.004 + 0.002 * c) + (y - ft) * 0.006) + disc + tex;
          p[((c * n + t) * H + y) * W + xx] = static_cast<float>((std::clamp(v, 0.0, 1.0) - mean[c]) / stdv[c]);
        }
      }
  }
  return x;
}

h3::Tensor soundtrack(int64_t samples, int rate) {
  h3::Tensor w(h3::DType::f32, {2, samples});
  float* p = w.data<float>();
  uint32_t rng = 777u;
  for (int64_t i = 0; i < samples; ++i) {
    rng = rng * 1664525u + 1013904223u;
    const double noise = ((rng >> 8) / 16777216.0 - 0.5) * 0.05, s = static_cast<double>(i) / rate;
    p[i] = static_cast<float>(0.3 * std::sin(2 * M_PI * 220 * s) * (0.6 + 0.4 * std::sin(2 * M_PI * 0.5 * s)) + noise);
    p[samples + i] = static_cast<float>(0.25 * std::sin(2 * M_PI * 330 * s + 0.3) + noise);
  }
  return w;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t W = 1344, H = 768, T = 124, chunk = 8;
  double gpu_seconds = 0;
  double audio_seconds = 0;
  bool json = false, late_end = false;
  int runs = 1;
  h3::MediaSpec spec;  // libx264's held-frame settings parsed into it; the sizes set below
  const std::string scratch = (std::filesystem::temp_directory_path() / "h3_mp4_tail.mp4").string();
  std::string out = scratch;  // removed at the end unless --out names the file
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "mp4_tail: %s needs a value\n", a.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--width")
      W = std::stoll(next());
    else if (a == "--height")
      H = std::stoll(next());
    else if (a == "--frames")
      T = std::stoll(next());
    else if (a == "--chunk")
      chunk = std::stoll(next());
    else if (a == "--gpu-seconds")
      gpu_seconds = std::stod(next());
    else if (a == "--runs")
      runs = std::stoi(next());
    else if (a == "--out")
      out = next();
    else if (a == "--audio-seconds")
      audio_seconds = std::stod(next());
    else if (a == "--json")
      json = true;
    else if (a == "--late-end")
      late_end = true;
    else if (a == "--lookahead")
      spec.x264_lookahead = std::stoi(next());
    else if (a == "--sync-lookahead")
      spec.x264_sync_lookahead = std::stoi(next());
    else if (a == "--threads")
      spec.x264_threads = std::stoi(next());
    else {
      std::fprintf(stderr, "mp4_tail: unknown option %s (see the file's header)\n", a.c_str());
      return 2;
    }
  }
  const int rate = 32000;
  const int64_t samples = T * rate / 24;
  std::vector<h3::Tensor> chunks;
  for (int64_t t = 0; t < T; t += chunk) chunks.push_back(scene(t, std::min(chunk, T - t), H, W));
  const h3::Tensor wave = soundtrack(samples, rate);
  spec.width = W;
  spec.height = H;
  spec.metadata["comment"] = std::string(2000, 'x');  // about the size of a request's JSON
  std::printf(
      "mp4_tail: %lld x %lld, %lld frames in chunks of %lld, %.2f s of video decode and %.2f s of audio decode "
      "simulated, %u hardware threads; libx264 look-ahead %d, sync look-ahead %d, threads %d (-1 / 0: libx264's)\n",
      static_cast<long long>(W), static_cast<long long>(H), static_cast<long long>(T), static_cast<long long>(chunk),
      gpu_seconds, audio_seconds, std::thread::hardware_concurrency(), spec.x264_lookahead, spec.x264_sync_lookahead,
      spec.x264_threads);
  std::printf("%4s %8s %8s %8s %6s | %8s %8s %8s %8s | %8s %9s\n", "run", "prepare", "encode", "x264_fl", "delay",
              "aac", "f_wait", "f_tail", "trailer", "last->f", "MB");
  for (int r = 0; r < runs; ++r) {
    const auto t_start = clock_type::now();
    h3::StreamingMp4 mp4(out, spec, h3::VideoVae::to_pixels01);
    for (const h3::Tensor& c : chunks) {
      if (gpu_seconds > 0)
        std::this_thread::sleep_for(std::chrono::duration<double>(gpu_seconds * c.dim(1) / static_cast<double>(T)));
      mp4.add_frames(c);
    }
    const auto t_last = clock_type::now();
    if (!late_end) mp4.end_video();
    if (audio_seconds > 0) std::this_thread::sleep_for(std::chrono::duration<double>(audio_seconds));
    mp4.finish(wave);
    const double tail = seconds_since(t_last), total = seconds_since(t_start);
    const h3::StreamingMp4::Times& mt = mp4.times();
    const h3::Mp4Writer::FinishTimes& ft = mt.writer;
    const double mb = static_cast<double>(std::filesystem::file_size(out)) / 1e6;
    std::printf("%4d %8.3f %8.3f %8.3f %6lld | %8.3f %8.3f %8.3f %8.3f | %8.3f %9.2f\n", r, mt.prepare, mt.encode,
                ft.video_flush, static_cast<long long>(ft.video_delayed), mt.audio + ft.audio, mt.finish_wait,
                mt.finish_tail, ft.trailer, tail, mb);
    if (json)
      std::printf("%s\n", nlohmann::json{{"width", W},
                                         {"height", H},
                                         {"frames", T},
                                         {"chunk", chunk},
                                         {"gpu_seconds", gpu_seconds},
                                         {"audio_seconds", audio_seconds},
                                         {"late_end", late_end},
                                         {"x264_lookahead", spec.x264_lookahead},
                                         {"x264_sync_lookahead", spec.x264_sync_lookahead},
                                         {"x264_threads", spec.x264_threads},
                                         {"prepare_s", mt.prepare},
                                         {"encode_s", mt.encode},
                                         {"finish_wait_s", mt.finish_wait},
                                         {"finish_tail_s", mt.finish_tail},
                                         {"x264_flush_s", ft.video_flush},
                                         {"x264_delayed_frames", ft.video_delayed},
                                         {"audio_s", mt.audio + ft.audio},
                                         {"trailer_s", ft.trailer},
                                         {"last_frame_to_file_s", tail},
                                         {"total_s", total},
                                         {"bytes", std::filesystem::file_size(out)}}
                              .dump()
                              .c_str());
  }
  if (out == scratch) std::filesystem::remove(out);
  return 0;
}

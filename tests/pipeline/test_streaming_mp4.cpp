// The streamed MP4 (pipeline/streaming_mp4.h): frames in uneven chunks prepared and encoded on the worker, libx264's
// end told early (end_video) or by finish(), the audio encoded on the caller while the worker flushes the video; the
// file must decode to what Mp4Writer writes from the whole clip at once. An error on the worker reaches finish() and
// leaves no file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "media/media_read.h"
#include "media/mp4_writer.h"
#include "pipeline/streaming_mp4.h"
#include "support/error_of.h"
#include "support/pictures.h"
#include "support/scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using h3::Tensor;

constexpr int64_t kT = 53, kH = 48, kW = 80;  // 53 frames: more than libx264 holds back, odd chunks below

// Moving detail in the decoder's space (prepare maps it to [0, 1]), so libx264 uses its B-frames and look-ahead.
Tensor decoder_clip() {
  return h3::test::clip_of(kT, kH, kW, [](int64_t c, int64_t f, int64_t y, int64_t x) {
    const double v = std::sin(0.21 * static_cast<double>(x + 3 * f) + 0.17 * static_cast<double>(y) + c) +
                     0.3 * std::cos(0.9 * static_cast<double>(x * y + f));
    return static_cast<float>(v);
  });
}

Tensor to01(const Tensor& x) {
  Tensor y(h3::DType::f32, x.shape());
  for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 0.5f + 0.35f * x.data<float>()[i];
  return y;
}

Tensor frames_of(const Tensor& clip, int64_t t0, int64_t n) {
  const int64_t T = clip.dim(1), plane = clip.dim(2) * clip.dim(3);
  Tensor out(h3::DType::f32, {3, n, clip.dim(2), clip.dim(3)});
  for (int64_t c = 0; c < 3; ++c)
    std::copy_n(clip.data<float>() + (c * T + t0) * plane, n * plane, out.data<float>() + c * n * plane);
  return out;
}

Tensor soundtrack() {
  const int64_t n = kT * 32000 / 24;
  Tensor w(h3::DType::f32, {2, n});
  for (int64_t i = 0; i < n; ++i) {
    w.data<float>()[i] = static_cast<float>(0.4 * std::sin(0.043 * static_cast<double>(i)));
    w.data<float>()[n + i] = static_cast<float>(0.3 * std::sin(0.061 * static_cast<double>(i) + 1.0));
  }
  return w;
}

h3::MediaSpec spec() {
  h3::MediaSpec s;
  s.width = kW;
  s.height = kH;
  s.metadata = {{"comment", R"({"prompt":"streamed","seed":3})"}, {"h3_seed", "3"}};
  return s;
}

}  // namespace

TEST(StreamingMp4, FileDecodesToTheWholeClipWritersFramesAndSound) {
  h3::test::ScratchDir dir;
  const Tensor clip = decoder_clip(), wave = soundtrack();
  const fs::path whole = dir / "whole.mp4";
  {
    h3::Mp4Writer w(whole.string(), spec());
    w.add_frames(to01(clip));
    w.add_audio(wave);
    w.finish();
  }
  const Tensor want_frames = h3::read_video_frames(whole.string(), 24, kT, kW, kH);
  const Tensor want_sound = h3::read_audio(whole.string(), 32000, 0);
  ASSERT_EQ(want_frames.dim(1), kT);
  // Early end (the decode phase's order: end_video, the audio decode, finish) and the end left to finish().
  for (bool early_end : {true, false}) {
    SCOPED_TRACE(early_end ? "end_video() first" : "end left to finish()");
    const fs::path streamed = dir / (early_end ? "early.mp4" : "late.mp4");
    {
      h3::StreamingMp4 mp4(streamed.string(), spec(), to01);
      int64_t t = 0;
      for (int64_t n : {7, 1, 17, 13, 15}) {
        mp4.add_frames(frames_of(clip, t, n));
        t += n;
      }
      ASSERT_EQ(t, kT);
      if (early_end) {
        mp4.end_video();
        EXPECT_NE(h3::test::error_of([&] { mp4.add_frames(frames_of(clip, 0, 1)); }).find("after end_video"),
                  std::string::npos);
      }
      mp4.finish(wave);
      EXPECT_GT(mp4.times().writer.video_delayed, 0) << "libx264 held no frames back: the flush was not exercised";
    }
    // The AAC encode does not depend on the thread or the moment: the same samples back.
    const Tensor sound = h3::read_audio(streamed.string(), 32000, 0);
    ASSERT_EQ(sound.shape(), want_sound.shape());
    EXPECT_TRUE(std::equal(sound.data<float>(), sound.data<float>() + sound.numel(), want_sound.data<float>()));
    // libx264's bytes depend on how the frames were handed over (Mp4Writer alone, the clip in one call or two, differs
    // from the frames the flush gives on; docs/notes.md), so the frames are compared decoded: each one close to the
    // whole-clip writer's same frame. A lost, repeated or swapped frame moves the picture 3 pixels per frame: far.
    const Tensor frames = h3::read_video_frames(streamed.string(), 24, kT, kW, kH);
    ASSERT_EQ(frames.shape(), want_frames.shape());
    const int64_t plane = kH * kW;
    for (int64_t f = 0; f < kT; ++f) {
      double diff = 0, apart = 0;  // mean |streamed - whole| on frame f; whole's frames f and f+-1 apart
      const int64_t g = f + 1 < kT ? f + 1 : f - 1;
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < plane; ++i) {
          const float w = want_frames.data<float>()[(c * kT + f) * plane + i];
          diff += std::abs(frames.data<float>()[(c * kT + f) * plane + i] - w);
          apart += std::abs(want_frames.data<float>()[(c * kT + g) * plane + i] - w);
        }
      EXPECT_LT(diff, 0.2 * apart) << "frame " << f << ": mean |difference| " << diff / (3.0 * plane)
                                   << " against a neighbour's " << apart / (3.0 * plane);
    }
  }
}

TEST(StreamingMp4, WorkerErrorReachesFinishAndLeavesNoFile) {
  h3::test::ScratchDir dir;
  const fs::path out = dir / "bad.mp4";
  {
    h3::StreamingMp4 mp4(out.string(), spec(), to01);
    mp4.add_frames(frames_of(decoder_clip(), 0, 5));
    mp4.add_frames(Tensor(h3::DType::f32, {3, 2, kH, kW + 2}));  // the wrong width: the worker's add_frames throws
    mp4.end_video();
    const std::string e = h3::test::error_of([&] { mp4.finish(soundtrack()); });
    EXPECT_NE(e.find("frames are"), std::string::npos) << e;
  }
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".partial"));
}

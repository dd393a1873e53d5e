#include <gtest/gtest.h>

#include <initializer_list>
#include <utility>

#include "core/error.h"
#include "pipeline/geometry.h"

using namespace h3;

namespace {

// rule(in) == out for each (in, out) of a frame-count rule.
void expect_values(int64_t (*rule)(int64_t), std::initializer_list<std::pair<int64_t, int64_t>> cases) {
  for (const auto& [in, out] : cases) EXPECT_EQ(rule(in), out) << "for " << in;
}

// The latent sizes a geometry derives from its clip: frames T, audio latents A per channel, height h, width w.
void expect_latents(const Geometry& g, int64_t latent_frames, int64_t audio_latents, int64_t latent_h,
                    int64_t latent_w) {
  EXPECT_EQ(g.latent_frames, latent_frames);
  EXPECT_EQ(g.audio_latents, audio_latents);
  EXPECT_EQ(g.latent_h, latent_h);
  EXPECT_EQ(g.latent_w, latent_w);
}

}  // namespace

TEST(Geometry, FramesSnapUpTo17nPlus5) {
  expect_values(align_num_frames, {{124, 124}, {120, 124}, {100, 107}, {125, 141}, {1, 5}, {243, 243}});
  EXPECT_THROW(align_num_frames(0), Error);
}

TEST(Geometry, LatentFrames) {
  expect_values(video_latent_frames, {{124, 37}, {243, 72}, {362, 107}, {107, 32}, {5, 2}});
  EXPECT_THROW(video_latent_frames(125), Error);
}

TEST(Geometry, AudioLatentsRoundLikePython) {
  // 124 frames = 206.67 latents, 107 = 178.33; 243 and 345 are exact. 3 frames = 5.0 latents exactly; 9 frames =
  // 15.0; ties only arise at x.5: 24*k + 12 frames /24*40 = 40k + 20.
  expect_values(audio_latents_per_channel, {{124, 207}, {243, 405}, {107, 178}, {345, 575}, {3, 5}});
}

TEST(Geometry, CanvasMustBeMultipleOf32) {
  EXPECT_NO_THROW(check_canvas(768, 1344));
  EXPECT_NO_THROW(check_canvas(32, 32));
  try {
    check_canvas(770, 1344);
    FAIL() << "770 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("770"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("32"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_canvas(768, 1000), Error);
  EXPECT_THROW(check_canvas(0, 1344), Error);
  EXPECT_THROW(check_canvas(768, -32), Error);
  EXPECT_THROW(make_geometry(124, 480, 850), Error);
}

TEST(Geometry, RequestDurationWindow) {
  EXPECT_NO_THROW(check_request_duration(124));
  EXPECT_NO_THROW(check_request_duration(345));
  EXPECT_THROW(check_request_duration(107), Error);  // too few frames (4.46 s)
  EXPECT_THROW(check_request_duration(362), Error);  // too many frames (15.08 s)
  try {
    make_request_geometry(400, 768, 1344);
    FAIL() << "400 frames accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("413"), std::string::npos) << e.what();  // names the aligned count
  }
  EXPECT_THROW(make_request_geometry(60, 768, 1344), Error);
  // Layout geometry itself has no duration window: the golden fl2va case is 107 frames.
  Geometry g = make_geometry(100, 480, 832);
  EXPECT_EQ(g.frames, 107);
  expect_latents(g, 32, 178, 30, 52);
}

TEST(Geometry, MakeGeometry768p) {
  expect_latents(make_request_geometry(124, 768, 1344), 37, 207, 48, 84);
}

TEST(Geometry, ResolveCanvasSize) {
  struct Case {
    double aspect_w, aspect_h;
    int64_t height, width;
  };
  // 4:1 -> 3072x768 is over the area cap: scale sqrt(0.4375) -> 2031.9 x 508.0 -> 2016 x 512.
  for (const Case& k : {Case{16, 9, 768, 1344}, Case{9, 16, 1344, 768}, Case{1, 1, 768, 768}, Case{4, 1, 512, 2016},
                        Case{1, 4, 2016, 512}}) {
    const CanvasSize c = resolve_canvas_size(k.aspect_w, k.aspect_h);
    EXPECT_EQ(c.height, k.height) << k.aspect_w << ":" << k.aspect_h;
    EXPECT_EQ(c.width, k.width) << k.aspect_w << ":" << k.aspect_h;
    EXPECT_EQ(c.height % 32, 0) << k.aspect_w << ":" << k.aspect_h;
  }
}

TEST(Geometry, AspectBeyond4To1IsRejected) {
  EXPECT_THROW(resolve_canvas_size(4.01, 1), Error);
  EXPECT_THROW(resolve_canvas_size(1, 5), Error);
  EXPECT_THROW(resolve_canvas_size(0, 1), Error);
  EXPECT_THROW(resolve_canvas_size(16, -9), Error);
}

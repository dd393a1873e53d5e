#include <gtest/gtest.h>

#include "core/error.h"
#include "pipeline/geometry.h"

using namespace h3;

TEST(Geometry, FramesSnapUpTo17nPlus5) {
  EXPECT_EQ(align_num_frames(124), 124);
  EXPECT_EQ(align_num_frames(120), 124);
  EXPECT_EQ(align_num_frames(100), 107);
  EXPECT_EQ(align_num_frames(125), 141);
  EXPECT_EQ(align_num_frames(1), 5);
  EXPECT_EQ(align_num_frames(243), 243);
  EXPECT_THROW(align_num_frames(0), Error);
}

TEST(Geometry, LatentFrames) {
  EXPECT_EQ(video_latent_frames(124), 37);
  EXPECT_EQ(video_latent_frames(243), 72);
  EXPECT_EQ(video_latent_frames(362), 107);
  EXPECT_EQ(video_latent_frames(107), 32);
  EXPECT_EQ(video_latent_frames(5), 2);
  EXPECT_THROW(video_latent_frames(125), Error);
}

TEST(Geometry, AudioLatentsRoundLikePython) {
  EXPECT_EQ(audio_latents_per_channel(124), 207);  // 206.67
  EXPECT_EQ(audio_latents_per_channel(243), 405);  // exact
  EXPECT_EQ(audio_latents_per_channel(107), 178);  // 178.33
  EXPECT_EQ(audio_latents_per_channel(345), 575);  // exact
  // 3 frames = 5.0 latents exactly; 9 frames = 15.0; ties only arise at x.5: 24*k + 12 frames /24*40 = 40k
  // + 20.
  EXPECT_EQ(audio_latents_per_channel(3), 5);
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
  EXPECT_EQ(g.latent_frames, 32);
  EXPECT_EQ(g.audio_latents, 178);
  EXPECT_EQ(g.latent_h, 30);
  EXPECT_EQ(g.latent_w, 52);
}

TEST(Geometry, MakeGeometry768p) {
  Geometry g = make_request_geometry(124, 768, 1344);
  EXPECT_EQ(g.latent_frames, 37);
  EXPECT_EQ(g.audio_latents, 207);
  EXPECT_EQ(g.latent_h, 48);
  EXPECT_EQ(g.latent_w, 84);
}

TEST(Geometry, ResolveCanvasSize) {
  CanvasSize c = resolve_canvas_size(16, 9);
  EXPECT_EQ(c.height, 768);
  EXPECT_EQ(c.width, 1344);
  c = resolve_canvas_size(9, 16);
  EXPECT_EQ(c.height, 1344);
  EXPECT_EQ(c.width, 768);
  c = resolve_canvas_size(1, 1);
  EXPECT_EQ(c.height, 768);
  EXPECT_EQ(c.width, 768);
  // 4:1 -> 3072x768 is over the area cap: scale sqrt(0.4375) -> 2031.9 x 508.0 -> 2016 x 512.
  c = resolve_canvas_size(4, 1);
  EXPECT_EQ(c.width, 2016);
  EXPECT_EQ(c.height, 512);
  c = resolve_canvas_size(1, 4);
  EXPECT_EQ(c.width, 512);
  EXPECT_EQ(c.height, 2016);
  EXPECT_EQ(c.height % 32, 0);
}

TEST(Geometry, AspectBeyond4To1IsRejected) {
  EXPECT_THROW(resolve_canvas_size(4.01, 1), Error);
  EXPECT_THROW(resolve_canvas_size(1, 5), Error);
  EXPECT_THROW(resolve_canvas_size(0, 1), Error);
  EXPECT_THROW(resolve_canvas_size(16, -9), Error);
}

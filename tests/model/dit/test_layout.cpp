#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

#include "core/error.h"
#include "io/safetensors.h"
#include "model/dit/layout.h"
#include "pipeline/geometry.h"
#include "verify/layouts.h"

using namespace h3;

namespace {

TargetGrid grid_of(const Geometry& g) {
  return {g.latent_frames, g.latent_h, g.latent_w, g.audio_latents};
}

double pos(const PackedLayout& l, int64_t row, int axis) {
  return l.position_ids[row * 3 + axis];
}

int run_verifier(const std::string& file) {
  const std::string path = std::string(H3_GOLDEN_DIR) + "/" + file;
  SafeTensors f = SafeTensors::open(path);
  EXPECT_TRUE(looks_like_layout_golden(f));
  return verify_layouts(f, stdout);
}

}  // namespace

// Spec §3.6: t2va at 768x1344, 124 frames.
TEST(Layout, WorkedExample768p) {
  const int64_t L = 11;
  PackedLayout l = build_fl2va_layout(std::vector<int64_t>(L, kTagText), grid_of(make_geometry(124, 768, 1344)), {});
  EXPECT_EQ(l.seq_len, L + 37710);
  EXPECT_EQ(l.video_indices.size(), 37296u);
  EXPECT_EQ(l.audio_indices.size(), 414u);
  EXPECT_EQ(l.audio_indices.front(), L);
  EXPECT_EQ(l.video_indices.front(), L + 414);
  EXPECT_EQ(l.num_condition_video_rows, 0);
  for (int64_t i = 0; i < L; ++i) EXPECT_EQ(pos(l, i, 0), static_cast<double>(i));
  // Audio: t in [L, L+206], w pinned to the two width extremes; channel-major.
  EXPECT_EQ(pos(l, L, 0), L);
  EXPECT_EQ(pos(l, L + 206, 0), L + 206);
  EXPECT_EQ(pos(l, L + 207, 0), L);
  EXPECT_NEAR(pos(l, L, 2), -5.166, 1e-3);
  EXPECT_NEAR(pos(l, L + 207, 2), 36.158, 1e-3);
  EXPECT_EQ(pos(l, L, 1), 0.0);
  // Video: first frame at L, frame 1 at L + 5/3, last of 37 at L + 200; h in [3.905, 27.087].
  const int64_t v0 = L + 414;
  EXPECT_EQ(pos(l, v0, 0), L);
  EXPECT_NEAR(pos(l, v0 + 1008, 0), L + 5.0 / 3.0, 1e-12);
  EXPECT_NEAR(pos(l, v0 + 2 * 1008, 0), L + 25.0 / 3.0, 1e-12);
  EXPECT_NEAR(pos(l, l.seq_len - 1, 0), L + 200, 1e-9);
  EXPECT_NEAR(pos(l, v0, 1), 3.905, 1e-3);
  EXPECT_NEAR(pos(l, l.seq_len - 1, 1), 27.087, 1e-3);
  EXPECT_NEAR(pos(l, v0, 2), -5.166, 1e-3);
  EXPECT_NEAR(pos(l, v0 + 41, 2), 36.158, 1e-3);
  EXPECT_NEAR(pos(l, v0 + 1, 2) - pos(l, v0, 2), 1.00791, 1e-5);
  EXPECT_EQ(pos(l, v0 + 42, 1) - pos(l, v0, 1), pos(l, v0 + 1, 2) - pos(l, v0, 2));  // square cells
  EXPECT_EQ(std::count(l.token_tags.begin(), l.token_tags.end(), kTagAudio), 414);
  EXPECT_EQ(std::count(l.token_tags.begin(), l.token_tags.end(), kTagText), L);
  // 10 s: T = 72 -> 72,576 video rows, 810 audio rows.
  PackedLayout l10 = build_fl2va_layout({}, grid_of(make_geometry(243, 768, 1344)), {});
  EXPECT_EQ(l10.video_indices.size(), 72576u);
  EXPECT_EQ(l10.audio_indices.size(), 810u);
}

TEST(Layout, KeyframesAndVisionRows) {
  const int64_t L = 9;
  auto tags = text_tags_with_vision(L, {{2, 5}});
  EXPECT_EQ(tags, (std::vector<int64_t>{1, 1, 0, 0, 0, 1, 1, 1, 1}));
  TargetGrid t = grid_of(make_geometry(124, 64, 96));  // 4x6 latent -> 2x3 = 6 rows per frame
  PackedLayout l = build_fl2va_layout(tags, t, {KeyframeAnchor::first, KeyframeAnchor::last});
  const int64_t F = 6;
  EXPECT_EQ(l.seq_len, L + 2 * F + 2 * 207 + 37 * F);
  EXPECT_EQ(l.num_condition_video_rows, 2 * F);
  EXPECT_EQ(l.video_indices[0], L);
  EXPECT_EQ(l.video_indices[2 * F], L + 2 * F + 414);
  EXPECT_EQ(pos(l, L, 0), L);                      // "first" at the clock origin
  EXPECT_NEAR(pos(l, L + F, 0), L + 205.0, 1e-9);  // "last" = L + (5/3)(124 - 1)
  EXPECT_EQ(l.token_tags[L], kTagVideo);
  EXPECT_EQ(l.token_tags[3], kTagVideo);
  EXPECT_EQ(l.token_tags[L + 2 * F], kTagAudio);
  EXPECT_THROW(text_tags_with_vision(4, {{3, 6}}), Error);
  EXPECT_THROW(build_fl2va_layout(tags, {37, 5, 6, 207}, {}), Error);  // odd latent height
}

TEST(Layout, Ref2vaClock) {
  const int64_t L = 4;
  TargetGrid t{2, 4, 4, 3};  // 2 frames of 2x2 rows, 3 audio latents
  std::vector<Reference> refs = {
      {Reference::Kind::image, 1, 4, 6, 0},  // 6 rows, clock +1
      {Reference::Kind::audio, 0, 0, 0, 5},  // 10 rows, clock +5
      {Reference::Kind::video, 7, 4, 4, 2},  // soundtrack 4 rows then 28 rows, clock + max(2, span(7))
      {Reference::Kind::video, 1, 2, 2, 0},  // silent: 1 row, clock + max(0, 5/3)
  };
  PackedLayout l = build_ref2va_layout(std::vector<int64_t>(L, kTagText), t, refs);
  EXPECT_EQ(l.seq_len, L + 6 + 10 + 4 + 28 + 1 + 6 + 8);
  EXPECT_EQ(l.num_condition_video_rows, 6 + 28 + 1);
  EXPECT_EQ(l.num_condition_audio_rows, 10 + 4);
  EXPECT_EQ(pos(l, L, 0), 4.0);        // image
  EXPECT_EQ(pos(l, L + 6, 0), 5.0);    // audio ref starts after the image's one slot
  EXPECT_EQ(pos(l, L + 16, 0), 10.0);  // soundtrack at the video's origin
  EXPECT_EQ(pos(l, L + 20, 0), 10.0);  // its first frame too
  const double span7 = 5.0 / 3.0 * (1 + 4 + 4 + 4 + 4 + 1 + 4);
  EXPECT_NEAR(pos(l, L + 48, 0), 10.0 + span7, 1e-12);              // silent video
  EXPECT_NEAR(pos(l, L + 49, 0), 10.0 + span7 + 5.0 / 3.0, 1e-12);  // target audio
  EXPECT_EQ(pos(l, L + 49, 0), pos(l, L + 55, 0));                  // target video shares the origin
  EXPECT_EQ(l.audio_indices.size(), 10u + 4u + 6u);
  EXPECT_EQ(l.video_indices.back(), l.seq_len - 1);

  RowTimesteps p = plan_row_timesteps(l, 0.25f, 0.5f);
  EXPECT_EQ(p.timestep, (std::vector<float>{0.25f, 0.5f, 0.999f, 1.0f}));
  EXPECT_EQ(p.timestep_indices[0], 0);       // text: video t
  EXPECT_EQ(p.timestep_indices[L], 2);       // image ref
  EXPECT_EQ(p.timestep_indices[L + 6], 3);   // audio ref: clean
  EXPECT_EQ(p.timestep_indices[L + 49], 1);  // target audio
  EXPECT_EQ(p.timestep_indices[L + 55], 0);  // target video
  p = plan_row_timesteps(l, 0.9995f, 0.9995f);
  EXPECT_EQ(p.timestep, (std::vector<float>{0.9995f, 1.0f}));  // condition rows follow t_video above 0.999
}

TEST(Layout, PatchifyIndexMapAndRoundTrip) {
  const int64_t C = 3, T = 2, H = 4, W = 6;
  std::vector<float> v(C * T * H * W);
  for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);
  Tensor lat = Tensor::from(v, {C, T, H, W});
  Tensor rows = patchify_video(lat);
  ASSERT_EQ(rows.shape(), (Shape{T * 2 * 3, C * 4}));
  // row (f=1, y=1, x=2), feature (c=2, py=1, px=0) <- latent [2, 1, 3, 4]
  const int64_t row = (1 * 2 + 1) * 3 + 2, feat = 2 * 4 + 1 * 2 + 0;
  EXPECT_EQ(rows.data<float>()[row * 12 + feat], lat.data<float>()[((2 * T + 1) * H + 3) * W + 4]);
  Tensor back = unpatchify_video(rows, C, T, H, W);
  for (int64_t i = 0; i < back.numel(); ++i) ASSERT_EQ(back.data<float>()[i], v[i]);
  EXPECT_THROW(unpatchify_video(rows, C, T, H, 8), Error);

  const int64_t Ca = 5, A = 7;
  std::vector<double> a(2 * Ca * A);
  for (size_t i = 0; i < a.size(); ++i) a[i] = 0.5 * static_cast<double>(i);
  Tensor al = Tensor::from(a, {2, Ca, A});
  Tensor ar = pack_audio(al);
  ASSERT_EQ(ar.shape(), (Shape{2 * A, Ca}));
  EXPECT_EQ(ar.data<double>()[(1 * A + 3) * Ca + 4], al.data<double>()[(1 * Ca + 4) * A + 3]);
  Tensor ab = unpack_audio(ar, A);
  for (int64_t i = 0; i < ab.numel(); ++i) ASSERT_EQ(ab.data<double>()[i], a[i]);
}

TEST(Layout, GoldenLayoutsPass) {
  const std::string path = std::string(H3_GOLDEN_DIR) + "/layouts.safetensors";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "golden file missing: " << path;
  EXPECT_EQ(run_verifier("layouts.safetensors"), 0);
}

TEST(Layout, GoldenRef2vaLayoutsPass) {
  const std::string path = std::string(H3_GOLDEN_DIR) + "/layouts-ref2va.safetensors";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "golden file missing: " << path;
  EXPECT_EQ(run_verifier("layouts-ref2va.safetensors"), 0);
}

// The verifier must catch a one-ulp change in a position and a geometry it cannot match.
TEST(Layout, VerifierRejectsAlteredLayout) {
  const std::string geometry = R"({"tiny": {"num_text": 5, "vision_rows": [[1, 3]], "keyframes": ["last"],
      "num_frames": 22, "latent_h": 4, "latent_w": 6, "S": 0}})";
  auto tags = text_tags_with_vision(5, {{1, 3}});
  PackedLayout l = build_fl2va_layout(tags, grid_of(make_geometry(22, 64, 96)), {KeyframeAnchor::last});
  auto i64 = [](const std::vector<int64_t>& v) { return Tensor::from(v, {static_cast<int64_t>(v.size())}); };
  auto write = [&](const std::string& path, const std::vector<double>& positions) {
    write_safetensors(path,
                      {{"tiny.position_ids", Tensor::from(positions, {l.seq_len, 3})},
                       {"tiny.token_tags", i64(l.token_tags)},
                       {"tiny.video_indices", i64(l.video_indices)},
                       {"tiny.audio_indices", i64(l.audio_indices)},
                       {"tiny.text_indices", i64(l.text_indices)}},
                      {{"geometries", geometry}});
  };
  const std::string dir = ::testing::TempDir();
  std::string good = geometry;
  good.replace(good.find("\"S\": 0"), 6, "\"S\": " + std::to_string(l.seq_len));
  write_safetensors(dir + "/h3_layout_ok.safetensors",
                    {{"tiny.position_ids", l.position_tensor()},
                     {"tiny.token_tags", i64(l.token_tags)},
                     {"tiny.video_indices", i64(l.video_indices)},
                     {"tiny.audio_indices", i64(l.audio_indices)},
                     {"tiny.text_indices", i64(l.text_indices)}},
                    {{"geometries", good}});
  std::FILE* sink = std::tmpfile();
  EXPECT_EQ(verify_layouts(SafeTensors::open(dir + "/h3_layout_ok.safetensors"), sink), 0);

  // Wrong S in the metadata, and the last keyframe's time one ulp off.
  std::vector<double> p = l.position_ids;
  const int64_t row = 5;  // first keyframe row
  p[row * 3] = std::nextafter(p[row * 3], 1e9);
  write(dir + "/h3_layout_bad.safetensors", p);
  EXPECT_EQ(verify_layouts(SafeTensors::open(dir + "/h3_layout_bad.safetensors"), sink), 1);
  std::fclose(sink);
}

// A golden file's metadata is read by the bounded parser: geometries nested 150,000 deep are a failed item, not a
// crash (nlohmann's own parser recursed off the stack), and a long note or key costs one pass.
TEST(Layout, HostileMetadataIsRefusedNotRecursed) {
  const std::string dir = ::testing::TempDir();
  const std::string deep = std::string(150000, '[') + std::string(150000, ']');
  std::string note = "schedule.step shift " + std::string(100000, ' ') + "x; " + std::string(100000, '7') + " grid";
  write_safetensors(
      dir + "/h3_layout_deep.safetensors",
      {{"schedule.step.x", Tensor::from(std::vector<float>{0.f}, {1})},
       {"schedule.shift" + std::string(40000, '1') + ".n5.sigmas", Tensor::from(std::vector<float>{0.f}, {1})}},
      {{"geometries", deep}, {"note", note}});
  std::FILE* sink = std::tmpfile();
  EXPECT_EQ(verify_layouts(SafeTensors::open(dir + "/h3_layout_deep.safetensors"), sink), 1);
  std::fclose(sink);
}

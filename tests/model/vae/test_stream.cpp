// The streaming video decode on the CPU backend: the per-pixel frame stitch (ops::stitch_frames driven by
// frame_schedule) against the reference-order stitch (VideoVae::stitch) on random units over tile and chunk
// geometries with odd sizes, padding and trimming; stacked ViT calls (decode_blocks) against one block at a time;
// and decode_streaming against decode. Everything is compared bitwise: the GPU path relies on these equalities.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/compare.h"
#include "io/procedural.h"
#include "model/qwen3vl/procedural.h"
#include "model/vae/procedural.h"
#include "model/vae/tiling.h"
#include "model/vae/video_vae.h"
#include "ops/ops.h"
#include "pipeline/noise.h"

namespace h3 {
namespace {

struct Geometry {
  int64_t frames, h, w;         // latents
  int64_t tile, overlap;        // pixels; tile 0 = tiling off
  int64_t clip = 17, drop = 3;  // temporal chunking
  const char* what;
};

VideoVaeConfig config_for(const Geometry& g) {
  VideoVaeConfig cfg = procedural_video_vae_config();
  cfg.tiling = g.tile > 0;
  if (g.tile > 0) {
    cfg.tile_height = cfg.tile_width = g.tile;
    cfg.tile_overlap_height = cfg.tile_overlap_width = g.overlap;
  }
  cfg.clip_length = g.clip;
  cfg.token_drop = g.drop;
  return cfg;
}

// The video assembled from the streamed frames, checking that calls come in order and cover it once.
Tensor collect(const VideoVae& vae, const VideoDecodePlan& plan,
               const std::function<void(const VideoVae::FrameSink&)>& run) {
  const VideoVaeConfig& cfg = vae.config();
  const int64_t C = cfg.out_channels, F = plan.time.out_frames;
  const int64_t H = plan.latent_height * cfg.spatial_ratio(), W = plan.latent_width * cfg.spatial_ratio();
  Tensor video(vae.compute_dtype(), {C, F, H, W});
  int64_t next = 0;
  run([&](int64_t first, const Tensor& frames) {
    ASSERT_FALSE(frames.on_device());
    ASSERT_EQ(first, next) << "frames out of order";
    ASSERT_EQ(frames.dim(0), C);
    ASSERT_EQ(frames.dim(2), H);
    ASSERT_EQ(frames.dim(3), W);
    ASSERT_LE(first + frames.dim(1), F);
    const int64_t n = frames.dim(1);
    const size_t plane = static_cast<size_t>(H * W) * dtype_size(video.dtype());
    for (int64_t c = 0; c < C; ++c)
      std::memcpy(static_cast<std::byte*>(video.raw()) + (c * F + first) * plane,
                  static_cast<const std::byte*>(frames.raw()) + c * n * plane, n * plane);
    next += n;
  });
  EXPECT_EQ(next, F) << "streamed frames do not cover the video";
  return video;
}

const Geometry kGeometries[] = {
    {12, 6, 9, 64, 16, 17, 3, "2 chunks x 2 x 3 tiles"},
    {9, 5, 11, 48, 16, 17, 3, "padded and trimmed chunks, odd tile grid"},
    {19, 7, 4, 80, 32, 17, 3, "4 chunks, one tile column, uneven overlaps"},
    {14, 3, 5, 0, 0, 17, 3, "tiling off"},
    {8, 4, 6, 32, 16, 17, 0, "no token drop (one part per chunk)"},
    {7, 6, 6, 96, 48, 13, 2, "other clip length and drop"},
};

TEST(VaeStream, FrameStitchEqualsReferenceStitchBitwise) {
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  for (Precision p : {Precision::f32, Precision::f64}) {
    for (const Geometry& g : kGeometries) {
      SCOPED_TRACE(std::string(g.what) + " " + std::string(precision_name(p)));
      const VideoVaeConfig cfg = config_for(g);
      const VideoVae vae(*file, "", cfg, p);
      const VideoDecodePlan plan = vae.plan_decode({cfg.latent_channels, g.frames, g.h, g.w});
      std::vector<Tensor> decoded;
      const int64_t q = cfg.temporal_ratio(), r = cfg.spatial_ratio();
      for (const auto& u : plan.units)
        decoded.push_back(
            seeded_normal({cfg.out_channels, q * (u.t1 - u.t0), r * (u.y1 - u.y0), r * (u.x1 - u.x0)}, 100 + u.index, 5)
                .to(vae.compute_dtype()));
      const Tensor want = vae.stitch(plan, decoded);
      const Tensor got =
          collect(vae, plan, [&](const VideoVae::FrameSink& sink) { vae.stitch_streaming(plan, decoded, sink); });
      const Diff d = compare(got, want);
      EXPECT_TRUE(d.shape_ok) << got.describe() << " vs " << want.describe();
      EXPECT_TRUE(d.bitwise) << "rel_l2 " << d.rel_l2 << " max_abs " << d.max_abs << " (" << plan.units.size()
                             << " units, " << plan.time.out_frames << " frames)";
      // The chunk-row loop that fills one clip (the sharded decode's GPU stitch; here on the CPU backend).
      const Tensor clip = vae.stitch_on_device(plan, decoded);
      EXPECT_TRUE(compare(clip, want).shape_ok && compare(clip, want).bitwise) << "stitch_on_device";
    }
  }
}

// A mutation the comparison must catch: a schedule with one cross-fade weight moved gives different frames.
TEST(VaeStream, FrameStitchNoticesAWrongFade) {
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  const VideoVaeConfig cfg = config_for(kGeometries[0]);
  const VideoVae vae(*file, "", cfg, Precision::f32);
  const VideoDecodePlan plan = vae.plan_decode({cfg.latent_channels, 12, 6, 9});
  auto sched = frame_schedule(plan, true);
  ASSERT_GE(sched.size(), 2u);
  ASSERT_FALSE(sched[1].empty());
  ASSERT_GT(sched[1][1].fade_e, 0) << "the second chunk's first frames must cross-fade";
  std::vector<Tensor> decoded;
  for (const auto& u : plan.units)
    decoded.push_back(seeded_normal({3, 4 * (u.t1 - u.t0), 16 * (u.y1 - u.y0), 16 * (u.x1 - u.x0)}, 7 + u.index, 5));
  const size_t n = plan.rows.starts.size() * plan.cols.starts.size();
  const std::vector<Tensor> cur(decoded.begin() + n, decoded.begin() + 2 * n),
      prev(decoded.begin(), decoded.begin() + n);
  const Tensor good = ops::stitch_frames(cur, prev, stitch_grid(plan), {sched[1][1]});
  auto bad_frame = sched[1][1];
  bad_frame.fade_p += 1;
  const Tensor bad = ops::stitch_frames(cur, prev, stitch_grid(plan), {bad_frame});
  EXPECT_FALSE(compare(good, bad).bitwise);
}

TEST(VaeStream, StackedBlocksEqualOneAtATime) {
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  const VideoVaeConfig cfg = procedural_video_vae_config();
  const VideoVae vae(*file, "", cfg, Precision::f32);
  std::vector<Tensor> blocks;
  for (uint64_t i = 0; i < 3; ++i) blocks.push_back(seeded_normal({cfg.latent_channels, 3, 2, 5}, 40 + i, 6));
  const std::vector<Tensor> stacked = vae.decode_blocks(blocks);
  ASSERT_EQ(stacked.size(), blocks.size());
  for (size_t i = 0; i < blocks.size(); ++i) {
    const Tensor alone = vae.decode_block(blocks[i]);
    const Diff d = compare(stacked[i], alone);
    EXPECT_TRUE(d.shape_ok && d.bitwise) << "block " << i << ": rel_l2 " << d.rel_l2;
  }
  // Different inputs must give different tiles (the comparison above is not vacuous).
  EXPECT_FALSE(compare(stacked[0], stacked[1]).bitwise);
}

TEST(VaeStream, AttentionBlocksEqualsPerBlockAttention) {
  const int64_t n = 13, d = 8, heads = 3, blocks = 3;
  const Tensor q = seeded_normal({blocks * n, heads * d}, 1, 7), k = seeded_normal({blocks * n, heads * d}, 2, 7),
               v = seeded_normal({blocks * n, heads * d}, 3, 7);
  const Tensor all = ops::attention_blocks(q, k, v, d, blocks);
  for (int64_t b = 0; b < blocks; ++b) {
    const Tensor one = ops::attention(q.rows(b * n, (b + 1) * n).clone(), k.rows(b * n, (b + 1) * n).clone(),
                                      v.rows(b * n, (b + 1) * n).clone(), d);
    EXPECT_TRUE(compare(all.rows(b * n, (b + 1) * n).clone(), one).bitwise) << "block " << b;
  }
  // Full attention over all rows differs: the blocks really are separate.
  EXPECT_FALSE(compare(all, ops::attention(q, k, v, d)).bitwise);
}

TEST(VaeStream, RmsNormToIsTheNormThenTheConversion) {
  const Tensor x = seeded_normal({7, 24}, 11, 7), w = seeded_normal({8}, 12, 7);
  EXPECT_TRUE(
      compare(ops::rms_norm(x, &w, 8, 1e-6, ops::NormRound::once, DType::f32), ops::rms_norm(x, &w, 8, 1e-6)).bitwise);
  const Tensor x64 = x.to(DType::f64), w64 = w.to(DType::f64);
  const Tensor y = ops::rms_norm(x64, &w64, 8, 1e-6, ops::NormRound::once, DType::f32);
  EXPECT_EQ(y.dtype(), DType::f32);
  EXPECT_TRUE(compare(y, ops::rms_norm(x64, &w64, 8, 1e-6).to(DType::f32)).bitwise);
}

TEST(VaeStream, StreamingDecodeEqualsDecode) {
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  const Geometry& g = kGeometries[1];
  const VideoVaeConfig cfg = config_for(g);
  const VideoVae vae(*file, "", cfg, Precision::f32);
  const Tensor z = seeded_normal({cfg.latent_channels, g.frames, g.h, g.w}, 9, 8);
  const VideoDecodePlan plan = vae.plan_decode(z.shape());
  ASSERT_GE(plan.units.size(), 4u);
  const Tensor want = vae.decode(z);
  for (int64_t batch : {int64_t{0}, int64_t{1}, int64_t{4}}) {
    const Tensor got =
        collect(vae, plan, [&](const VideoVae::FrameSink& sink) { vae.decode_streaming(z, sink, batch); });
    const Diff d = compare(got, want);
    EXPECT_TRUE(d.shape_ok && d.bitwise) << "batch " << batch << ": rel_l2 " << d.rel_l2;
  }
}

// vae::crop (one serial pass, used for every decode unit's latents) equals the three slice_dim calls it replaced,
// on odd sizes, at the edges and for an empty range; a range outside the tensor is refused.
TEST(VaeStream, CropEqualsThreeSlices) {
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor z(dt, {5, 9, 7, 11});
    for (int64_t i = 0; i < z.numel(); ++i) {
      const double v = std::sin(0.37 * static_cast<double>(i)) * 3.0 + 0.001 * static_cast<double>(i % 13);
      if (dt == DType::f32)
        z.data<float>()[i] = static_cast<float>(v);
      else
        z.data<double>()[i] = v;
    }
    const int64_t cases[][6] = {
        {0, 9, 0, 7, 0, 11}, {2, 5, 1, 6, 3, 10}, {8, 9, 6, 7, 10, 11}, {0, 1, 0, 7, 4, 5}, {3, 3, 0, 7, 0, 11}};
    for (const auto& c : cases) {
      const Tensor a = vae::crop(z, c[0], c[1], c[2], c[3], c[4], c[5]);
      const Tensor b = vae::slice_dim(vae::slice_dim(vae::slice_dim(z, 1, c[0], c[1]), 2, c[2], c[3]), 3, c[4], c[5]);
      ASSERT_EQ(a.shape(), b.shape());
      EXPECT_EQ(0, std::memcmp(a.raw(), b.raw(), a.nbytes())) << c[0] << " " << c[1] << " " << c[2] << " " << c[4];
    }
    EXPECT_ANY_THROW(vae::crop(z, 0, 10, 0, 7, 0, 11));
    EXPECT_ANY_THROW(vae::crop(z, 0, 9, 5, 4, 0, 11));
  }
}

}  // namespace
}  // namespace h3

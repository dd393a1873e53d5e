// The VAE decoders on the GPU (their ops against the CPU backend: tests/ops/test_backend_ops.cpp): the fused ops
// bitwise equal to the ops they fuse, the device stitch, then the two mini decoders on the GPU against the CPU decoders
// and against the golden files, and the decode units' independence (what sharding over GPU ranks relies on). Without a
// GPU every test here reports itself SKIPPED, loudly.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "backend/backend.h"
#include "core/compare.h"
#include "core/dtype.h"
#include "io/procedural.h"
#include "io/safetensors.h"
#include "model/qwen3vl/procedural.h"
#include "model/vae/procedural.h"
#include "ops/ops.h"
#include "support/golden.h"
#include "verify/vae.h"

#include "support/gpu_test.h"

namespace h3 {
namespace {

using test::gpu_ready;

// Random f32 values with bf16-exact magnitudes, so both backends start from identical inputs in either dtype.
Tensor rnd(Shape s, uint64_t seed, double scale = 1.0) {
  return test::bf16_exact_normal(s, seed, 11, scale);
}
Tensor gpu(const Tensor& t, DType dt = DType::f32) {
  return t.to_device(Device::cuda).to(dt);
}

void expect_bitwise(const Tensor& got, const Tensor& want, const std::string& what) {
  const Diff d = compare(got.cpu().to(DType::f32), want);
  EXPECT_TRUE(d.shape_ok && d.bitwise) << what << ": rel_l2 " << d.rel_l2;
}

// The device stitch against the CPU's per-pixel stitch (itself bitwise the reference stitch,
// tests/model/vae/test_stream.cpp): uneven tiles, cross-fades, more frames than one kernel launch takes.
TEST(CudaVaeOps, StitchFramesMatchesCpuBitwise) {
  H3_REQUIRE_GPU();
  ops::StitchGrid g;
  g.rows = 3, g.cols = 2;
  g.row_overlaps = {5, 9};
  g.col_overlaps = {7};
  const int64_t heights[3] = {17, 19, 13}, widths[2] = {23, 11}, C = 3, T = 31;
  std::vector<Tensor> cur, prev, gcur, gprev;
  for (int64_t a = 0; a < g.rows; ++a)
    for (int64_t b = 0; b < g.cols; ++b) {
      cur.push_back(rnd({C, T, heights[a], widths[b]}, 300 + a * 7 + b));
      prev.push_back(rnd({C, T + 2, heights[a], widths[b]}, 400 + a * 7 + b));
      gcur.push_back(gpu(cur.back()));
      gprev.push_back(gpu(prev.back()));
    }
  std::vector<ops::StitchFrame> frames;
  for (int64_t k = 0; k < 29; ++k) {  // 29 > kStitchMaxFrames (24): two launches
    ops::StitchFrame f;
    f.frame = (k * 5) % T;
    if (k % 3 != 2) {
      f.prev_frame = (k * 7) % (T + 2);
      f.fade_e = 5 + k % 4;
      f.fade_p = k % f.fade_e;
    }
    frames.push_back(f);
  }
  const Tensor want = ops::stitch_frames(cur, prev, g, frames);
  const Tensor got = ops::stitch_frames(gcur, gprev, g, frames);
  ASSERT_TRUE(got.on_device());
  expect_bitwise(got, want, "stitch_frames f32");
  // No fades: the previous chunk's tiles are not needed.
  for (auto& f : frames) f.fade_e = f.fade_p = 0;
  expect_bitwise(ops::stitch_frames(gcur, {}, g, frames), ops::stitch_frames(cur, {}, g, frames),
                 "stitch_frames f32 without fades");
}

// The fused norm + bf16 store against the two steps it replaces, bitwise (whole rows and per-head groups, odd sizes).
TEST(CudaVaeOps, RmsNormToBf16EqualsNormThenRound) {
  H3_REQUIRE_GPU();
  const Tensor x = rnd({37, 203}, 600, 3.0), w = rnd({203}, 601), x2 = rnd({29, 192}, 602, 2.0), w2 = rnd({64}, 603);
  const Tensor gx = gpu(x), gw = gpu(w), gx2 = gpu(x2), gw2 = gpu(w2);
  const Tensor fused = ops::rms_norm(gx, &gw, 203, 1e-5, ops::NormRound::once, DType::bf16);
  ASSERT_EQ(fused.dtype(), DType::bf16);
  expect_bitwise(fused, ops::rms_norm(gx, &gw, 203, 1e-5).to(DType::bf16).cpu().to(DType::f32), "rms_norm_to rows");
  expect_bitwise(ops::rms_norm(gx2, &gw2, 64, 1e-6, ops::NormRound::once, DType::bf16),
                 ops::rms_norm(gx2, &gw2, 64, 1e-6).to(DType::bf16).cpu().to(DType::f32), "rms_norm_to heads");
  expect_bitwise(ops::rms_norm(gx2, nullptr, 192, 1e-6, ops::NormRound::once, DType::bf16),
                 ops::rms_norm(gx2, nullptr, 192, 1e-6).to(DType::bf16).cpu().to(DType::f32), "rms_norm_to no weight");
  // f32 out: the plain norm.
  expect_bitwise(ops::rms_norm(gx, &gw, 203, 1e-5, ops::NormRound::once, DType::f32),
                 ops::rms_norm(gx, &gw, 203, 1e-5).cpu(), "rms_norm_to f32");
}

// The fused residual update + norm against add_scaled then rms_norm_to, both outputs bitwise: the decoder's width
// (2048, 2 values a thread), an odd width, per-head groups, no weight, an f32 branch, 5 values a thread, and the
// f32-out fallback.
TEST(CudaVaeOps, AddScaledNormToEqualsTheTwoOps) {
  H3_REQUIRE_GPU();
  struct Case {
    int64_t rows, cols, group;
    bool weight;
    DType branch, out;
  };
  const Case cases[] = {
      {53, 2048, 2048, true, DType::bf16, DType::bf16}, {37, 203, 203, true, DType::bf16, DType::bf16},
      {29, 192, 64, true, DType::f32, DType::bf16},     {31, 2048, 2048, false, DType::bf16, DType::bf16},
      {17, 4100, 4100, true, DType::bf16, DType::bf16}, {23, 203, 203, true, DType::bf16, DType::f32}};
  uint64_t seed = 700;
  for (const Case& c : cases) {
    const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.cols) + "/" + std::to_string(c.group) +
                             (c.weight ? "" : " no weight") + " branch " + std::string(dtype_name(c.branch)) + " out " +
                             std::string(dtype_name(c.out));
    const Tensor x = gpu(rnd({c.rows, c.cols}, seed++, 3.0)), y = gpu(rnd({c.rows, c.cols}, seed++), c.branch);
    const Tensor sc = gpu(rnd({c.cols}, seed++, 0.2)), w = gpu(rnd({c.group}, seed++));
    const Tensor* wp = c.weight ? &w : nullptr;
    const auto [sum, normed] = ops::add_scaled_rms_norm(x, y, sc, wp, c.group, 1e-5, c.out);
    ASSERT_EQ(normed.dtype(), c.out) << what;
    const Tensor want_sum = ops::add_scaled(x, y, sc);
    expect_bitwise(sum, want_sum.cpu(), "add_scaled_rms_norm sum " + what);
    expect_bitwise(normed, ops::rms_norm(want_sum, wp, c.group, 1e-5, ops::NormRound::once, c.out).cpu().to(DType::f32),
                   "add_scaled_rms_norm norm " + what);
  }
}

// bf16 runs the blocks as the batch of one cuDNN call; each block must still be bitwise attention() on its rows
// (what stacking and the sharded decode rely on), at a small shape and at the decoder's (1797 rows, 32 heads x 64).
TEST(CudaVaeOps, AttentionBlocksEqualPerBlockAttention) {
  H3_REQUIRE_GPU();
  struct Case {
    int64_t n, heads, blocks;
    DType dt;
  };
  for (const Case& c : {Case{37, 3, 3, DType::bf16}, Case{37, 3, 3, DType::f32}, Case{1797, 32, 5, DType::bf16}}) {
    const int64_t n = c.n, d = 64, heads = c.heads, blocks = c.blocks;
    const Tensor q = gpu(rnd({blocks * n, heads * d}, 500), c.dt), k = gpu(rnd({blocks * n, heads * d}, 501), c.dt),
                 v = gpu(rnd({blocks * n, heads * d}, 502), c.dt);
    const Tensor all = ops::attention_blocks(q, k, v, d, blocks);
    for (int64_t b = 0; b < blocks; ++b) {
      const Tensor one = ops::attention(q.rows(b * n, (b + 1) * n).clone(), k.rows(b * n, (b + 1) * n).clone(),
                                        v.rows(b * n, (b + 1) * n).clone(), d);
      expect_bitwise(all.rows(b * n, (b + 1) * n).clone(), one.cpu().to(DType::f32),
                     "attention_blocks n " + std::to_string(n) + " block " + std::to_string(b) + " " +
                         std::string(dtype_name(c.dt)));
    }
  }
}

// Stacking units into one GEMM (pinned algorithms, per-unit attention) must not change a unit's bits, or the
// sharded decode (other companions per rank) would differ from 1 rank.
TEST(CudaVae, StackedUnitsEqualOneAtATime) {
  H3_REQUIRE_GPU();
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  VideoVaeConfig cfg = procedural_video_vae_config();
  cfg.tile_height = cfg.tile_width = 64;
  cfg.tile_overlap_height = cfg.tile_overlap_width = 16;
  const Tensor z = rnd({cfg.latent_channels, 12, 6, 9}, 93);
  for (Precision p : {Precision::bf16, Precision::f32}) {
    const VideoVae g(*file, "", cfg, p, Device::cuda);
    const VideoDecodePlan plan = g.plan_decode(z.shape());
    const Tensor zp = g.pad_latents(z, plan);
    const std::vector<Tensor> one = g.decode_units_on_device(zp, plan.units, 1);
    for (int64_t batch : {int64_t{3}, int64_t{0}}) {
      const std::vector<Tensor> stacked = g.decode_units_on_device(zp, plan.units, batch);
      ASSERT_EQ(stacked.size(), one.size());
      for (size_t i = 0; i < one.size(); ++i)
        EXPECT_TRUE(compare(stacked[i].cpu(), one[i].cpu()).bitwise)
            << precision_name(p) << " unit " << i << " differs when stacked " << batch << " per call";
    }
  }
}

// The streaming GPU decode (device stitch, frames downloaded as they finish) against the host stitch of the same
// GPU units, on a 124-frame clip of 7 chunks x 2 x 2 tiles (padding, trimming, cross-fades, several downloads).
TEST(CudaVae, StreamingDecodeEqualsHostStitch) {
  H3_REQUIRE_GPU();
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  VideoVaeConfig cfg = procedural_video_vae_config();
  cfg.tile_height = cfg.tile_width = 32;
  cfg.tile_overlap_height = cfg.tile_overlap_width = 16;
  const Tensor z = rnd({cfg.latent_channels, 37, 3, 3}, 94);
  for (Precision p : {Precision::bf16, Precision::f32}) {
    const VideoVae g(*file, "", cfg, p, Device::cuda);
    const VideoDecodePlan plan = g.plan_decode(z.shape());
    ASSERT_EQ(plan.time.out_frames, 124);
    const Tensor zp = g.pad_latents(z, plan);
    std::vector<Tensor> units;
    for (const auto& u : plan.units) units.push_back(g.decode_unit(zp, u));  // host tensors
    const Tensor want = g.stitch(plan, units);
    const Tensor got = g.decode(z);
    ASSERT_FALSE(got.on_device());
    const Diff d = compare(got, want);
    EXPECT_TRUE(d.shape_ok && d.bitwise) << precision_name(p) << ": rel_l2 " << d.rel_l2;
    std::printf("  streaming GPU decode %-4s vs host stitch: %s\n", precision_name(p).data(),
                d.bitwise ? "bitwise" : "DIFFERENT");
    // Host units stitched on the GPU (the sharded decode's path after the gather).
    const Tensor clip = g.stitch_on_device(plan, units);
    EXPECT_TRUE(compare(clip, want).shape_ok && compare(clip, want).bitwise)
        << precision_name(p) << ": stitch_on_device";
  }
}

// The mini decoders (procedural weights, the released strides) on the GPU against the CPU decoders.
TEST(CudaVae, VideoMiniDecoderMatchesCpu) {
  H3_REQUIRE_GPU();
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  const VideoVaeConfig cfg = procedural_video_vae_config();
  const VideoVae cpu_vae(*file, "", cfg, Precision::f32);
  const Tensor z = rnd({cfg.latent_channels, 7, 5, 7}, 90);  // 7 latent frames = one chunk, 80 x 112 px
  const Tensor want = cpu_vae.decode(z);
  for (Precision p : {Precision::f32, Precision::bf16}) {
    const VideoVae g(*file, "", cfg, p, Device::cuda);
    const Tensor got = g.decode(z);
    ASSERT_FALSE(got.on_device());
    EXPECT_EQ(got.dtype(), DType::f32);
    const Diff d = compare(got, want);
    EXPECT_TRUE(d.shape_ok) << got.describe() << " vs " << want.describe();
    const double tol = p == Precision::f32 ? 1e-5 : 1e-2;
    EXPECT_LE(d.rel_l2, tol) << precision_name(p);
    std::printf("  video mini decoder GPU %-4s vs CPU f32: rel_l2 %.3e (tol %.0e)\n", precision_name(p).data(),
                d.rel_l2, tol);
  }
}

TEST(CudaVae, AudioMiniDecoderMatchesCpu) {
  H3_REQUIRE_GPU();
  auto file = procedural_audio_vae_file(kDefaultProceduralSeed);
  const AudioVaeConfig cfg = procedural_audio_vae_config();
  const AudioVae cpu_vae(*file, "", cfg, Precision::f32);
  const AudioVae gpu_vae(*file, "", cfg, Precision::f32, Device::cuda);
  const Tensor z = rnd({2, cfg.latent_channels, 5}, 91);  // 5 latents = 4000 samples per channel
  const Tensor want = cpu_vae.decode(z), got = gpu_vae.decode(z);
  ASSERT_FALSE(got.on_device());
  const Diff d = compare(got, want);
  EXPECT_TRUE(d.shape_ok) << got.describe() << " vs " << want.describe();
  EXPECT_LE(d.rel_l2, 1e-5);
  std::printf("  audio mini decoder GPU f32 vs CPU f32: rel_l2 %.3e (tol 1e-05)\n", d.rel_l2);
}

// Sharding relies on a unit's result depending on the unit alone: decoded in any order, alone or after others, it
// must be bitwise the same.
TEST(CudaVae, DecodeUnitsAreIndependentOfOrder) {
  H3_REQUIRE_GPU();
  auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  VideoVaeConfig cfg = procedural_video_vae_config();
  cfg.tile_height = cfg.tile_width = 64;  // several tiles of different shapes on a small canvas
  cfg.tile_overlap_height = cfg.tile_overlap_width = 16;
  const VideoVae g(*file, "", cfg, Precision::bf16, Device::cuda);
  const Tensor z = rnd({cfg.latent_channels, 12, 6, 9}, 92);  // 2 chunks x 2 x 3 tiles
  const VideoDecodePlan plan = g.plan_decode(z.shape());
  ASSERT_GE(plan.units.size(), 4u);
  const Tensor zp = g.pad_latents(z, plan);
  std::vector<Tensor> fwd, rev(plan.units.size());
  for (const auto& u : plan.units) fwd.push_back(g.decode_unit(zp, u));
  for (size_t i = plan.units.size(); i-- > 0;) rev[i] = g.decode_unit(zp, plan.units[i]);
  for (size_t i = 0; i < plan.units.size(); ++i)
    EXPECT_TRUE(compare(fwd[i], rev[i]).bitwise) << "unit " << i << " differs with the decode order";
  EXPECT_TRUE(compare(g.stitch(plan, fwd), g.decode(z)).bitwise) << "decode() differs from its units' stitch";
}

// The golden mini VAEs decoded on the GPU against the f64 reference: f32 within 1e-5, bf16 reported (bound 1e-2).
TEST(CudaVae, GoldenDecodersOnGpu) {
  H3_REQUIRE_GPU();
  for (const char* name : {"video-vae-mini.safetensors", "audio-vae-mini.safetensors"}) {
    const std::string path = test::golden(name);
    H3_REQUIRE_GOLDEN(path);
    const SafeTensors f = SafeTensors::open(path);
    const bool video = looks_like_video_vae_golden(f);
    for (Precision p : {Precision::f32, Precision::bf16}) {
      if (!video && p == Precision::bf16) continue;  // the audio VAE runs f32 on the GPU whatever is asked
      const VerifyReport rep = video ? verify_video_vae_file(f, p, nullptr, Device::cuda)
                                     : verify_audio_vae_file(f, p, nullptr, Device::cuda);
      std::printf("  %s on the GPU, %s:\n", name, precision_name(p).data());
      rep.print(stdout);
      EXPECT_TRUE(rep.pass()) << name << " " << precision_name(p);
    }
  }
}

}  // namespace
}  // namespace h3

// Previews while denoising and runs stopped and resumed at a step boundary (pipeline/preview.h, RunHooks in
// pipeline/generator.h, SamplingHooks in pipeline/sampling.h): a preview is exactly (bitwise) the frame a full decode
// of the same latents gives, the prediction is x + (1 - t) v, and neither previews nor a suspend/resume change the
// final latents by a bit; `h3 generate --preview-dir --count` on 1 and 2 ranks.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/compare.h"
#include "io/procedural.h"
#include "model/dit/checkpoint.h"
#include "model/vae/procedural.h"
#include "model/vae/tiling.h"
#include "pipeline/generator.h"
#include "pipeline/noise.h"
#include "pipeline/preview.h"
#include "pipeline/sampling.h"
#include "support/cli_run.h"
#include "support/error_of.h"
#include "support/scratch_dir.h"

namespace {

using namespace h3;

Generator& mini_generator() {
  static Generator g{ModelPaths{}, GenerateOptions{}};
  return g;
}

ResolvedRequest mini_request(int steps, uint64_t seed = 5) {
  GenerateRequest q;
  q.prompt = "a lighthouse at dusk, waves on the rocks";
  q.width = 128;
  q.height = 64;
  q.steps = steps;
  q.seed = seed;
  return resolve(q, mini_generator().limits());
}

std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}

}  // namespace

TEST(Preview, SpanIsTheFirstDecodeChunkAndItsLastFinishedFrame) {
  const VideoVaeConfig released;  // clip 17, token drop 3, 4x temporal: chunks of 5 + 2 latent frames
  const PreviewSpan s = preview_span(released, 37);  // 124 frames
  EXPECT_EQ(s.latent_frames, 7);
  EXPECT_EQ(s.frame, 16);                                   // chunk 0's first part: 20 frames less 3 of pre-padding
  EXPECT_EQ(preview_span(released, 7).latent_frames, 7);    // one chunk: the whole video
  EXPECT_EQ(preview_span(released, 102).latent_frames, 7);  // 345 frames
}

// The claim the preview rests on: its picture is the frame a full decode of the same latents makes (several chunks,
// two tile columns), scaled the same way.
TEST(Preview, PictureIsTheFullDecodesFrameBitwise) {
  const auto file = procedural_video_vae_file(kDefaultProceduralSeed);
  const VideoVaeConfig cfg = procedural_video_vae_config();
  const VideoVae vae(*file, "", cfg, Precision::f32);
  const Tensor z = seeded_normal({cfg.latent_channels, 37, 4, 20}, 9, 0);  // 124 frames of 64 x 320: 2 tile columns
  const PreviewSpan span = preview_span(cfg, 37);
  const Tensor full = VideoVae::to_pixels01(vae.decode(vae.denormalize(z)));  // [3, 124, 64, 320]
  ASSERT_EQ(full.shape(), (Shape{3, 124, 64, 320}));
  const Tensor frame = vae::slice_dim(full, 1, span.frame, span.frame + 1).reshape({3, 64, 320});
  const Tensor got = preview_picture(vae, z, span, 1000);
  EXPECT_TRUE(compare(got, frame).bitwise) << "rel_l2 " << compare(got, frame).rel_l2;
  // Scaled to at most 160 wide: the same area average of the full decode's frame.
  const Tensor small = preview_picture(vae, z, span, 160);
  EXPECT_EQ(small.shape(), (Shape{3, 32, 160}));
  EXPECT_TRUE(compare(small, downscale_picture(frame, 160)).bitwise);
}

TEST(Preview, DownscaleAveragesAreas) {
  Tensor t(DType::f32, {3, 2, 4});
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i % 4) / 4.0f;
  const Tensor d = downscale_picture(t, 2);  // 2 x 4 -> 1 x 2: pairs of columns averaged
  ASSERT_EQ(d.shape(), (Shape{3, 1, 2}));
  EXPECT_FLOAT_EQ(d.data<float>()[0], 0.125f);
  EXPECT_FLOAT_EQ(d.data<float>()[1], 0.625f);
  EXPECT_EQ(downscale_picture(t, 4).shape(), t.shape());  // narrow enough: unchanged
}

// Previews every 2 calls of 6: after calls 2 and 4 (never after the last), pictures of the canvas, and the final
// latents bitwise those of a run without previews.
TEST(Preview, GeneratorPreviewsChangeNothing) {
  Generator& gen = mini_generator();
  const ResolvedRequest req = mini_request(7);
  ASSERT_EQ(req.model_calls, 6);
  const GenerateResult plain = gen.run(req, "");
  std::vector<PreviewPicture> seen;
  RunHooks hooks;
  hooks.preview_every = 2;
  hooks.preview = [&](const PreviewPicture& p) { seen.push_back(p); };
  const GenerateResult with = gen.run(req, "", {}, nullptr, nullptr, &hooks);
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_EQ(seen[0].step, 2);
  EXPECT_EQ(seen[1].step, 4);
  EXPECT_EQ(seen[1].steps, 6);
  EXPECT_EQ(seen[0].picture.shape(), (Shape{3, 64, 128}));
  EXPECT_EQ(seen[0].x0_latents.shape(), (Shape{24, 7, 4, 8}));
  EXPECT_FALSE(compare(seen[0].picture, seen[1].picture).bitwise);  // the prediction moves
  EXPECT_EQ(with.previews, 2);
  EXPECT_TRUE(compare(with.video_latents, plain.video_latents).bitwise);
  EXPECT_TRUE(compare(with.audio_latent_rows, plain.audio_latent_rows).bitwise);
}

// The prediction after the last call is the final sample itself (sigma_next = 0: x' = 0 x + 1 x0), so the hook's x0 is
// the Euler step's own.
TEST(Preview, PredictionOfTheLastCallIsTheFinalSample) {
  // Through the loop directly: every call's prediction asked for.
  SamplingSpec spec;
  spec.latent_frames = 2;
  spec.latent_h = 4;
  spec.latent_w = 4;
  spec.audio_latents = 3;
  spec.num_text = 5;
  spec.steps = 4;
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  const DitModel dit(ck, Precision::f32, DistPlan::single());
  const DitConfig& c = dit.config();
  const Tensor embeds = seeded_normal({spec.num_text, c.text_dim}, 3, 0);
  const Tensor vnoise = seeded_normal({c.in_channels, spec.latent_frames, spec.latent_h, spec.latent_w}, 3, 1);
  const Tensor anoise = seeded_normal({2 * spec.audio_latents, c.audio_in_channels}, 3, 2);
  Tensor last_x0;
  int predictions = 0;
  SamplingHooks hooks;
  hooks.predict_at = [](int, int) { return true; };
  hooks.on_prediction = [&](int, int, const Tensor& x0) {
    last_x0 = x0.clone();
    ++predictions;
  };
  LoopEnd end;
  int done = 0;
  const SamplingRows rows = denoise_loop(dit, spec, embeds, vnoise, anoise, world(), hooks, &end, &done);
  EXPECT_EQ(end, LoopEnd::done);
  EXPECT_EQ(done, 3);
  EXPECT_EQ(predictions, 3);
  EXPECT_TRUE(compare(last_x0, rows.video).bitwise);
  const SamplingRows plain = denoise_loop(dit, spec, embeds, vnoise, anoise, world(), {}, {}, nullptr);
  EXPECT_TRUE(compare(plain.video, rows.video).bitwise);
}

// A run suspended after 2 of 5 calls throws Suspended with its state; resumed (after another request ran on the same
// generator) it ends with the latents of a run never stopped, its previews continuing where they were.
TEST(Preview, SuspendedRunResumesBitwise) {
  Generator& gen = mini_generator();
  const ResolvedRequest req = mini_request(6);
  const GenerateResult plain = gen.run(req, "");
  std::atomic<bool> suspend{false};
  int steps_seen = 0;
  auto progress = [&](const GenerateProgress& p) {
    if (p.phase == "denoise" && p.step == 2) suspend = true;
    if (p.phase == "denoise") steps_seen = p.step;
  };
  RunHooks hooks;
  hooks.suspend = &suspend;
  std::shared_ptr<SuspendedRun> state;
  try {
    (void)gen.run(req, "", progress, nullptr, nullptr, &hooks);
    ADD_FAILURE() << "the run was not suspended";
  } catch (const Suspended& e) {
    state = e.state;
  }
  ASSERT_TRUE(state);
  EXPECT_EQ(state->steps_done, 2);
  EXPECT_EQ(state->steps, 5);
  EXPECT_EQ(steps_seen, 2);
  (void)gen.run(mini_request(3, 99), "");  // another request between
  suspend = false;
  RunHooks again;
  again.resume = state;
  std::vector<int> resumed_steps;
  const GenerateResult r = gen.run(
      req, "",
      [&](const GenerateProgress& p) {
        if (p.phase == "denoise") resumed_steps.push_back(p.step);
      },
      nullptr, nullptr, &again);
  EXPECT_TRUE(compare(r.video_latents, plain.video_latents).bitwise);
  EXPECT_TRUE(compare(r.audio_latent_rows, plain.audio_latent_rows).bitwise);
  ASSERT_FALSE(resumed_steps.empty());
  EXPECT_EQ(resumed_steps.front(), 2);  // the progress picks up at the step it stopped at
  EXPECT_EQ(resumed_steps.back(), 5);
  bool encode_timed = false, denoise_timed = false;
  for (const auto& t : r.timings) {
    encode_timed |= t.phase == "encode";
    denoise_timed |= t.phase == "denoise";
  }
  EXPECT_TRUE(encode_timed && denoise_timed);
  // A cancel still wins over a suspend.
  std::atomic<bool> cancel{true};
  suspend = true;
  RunHooks both;
  both.suspend = &suspend;
  EXPECT_THROW(gen.run(req, "", {}, &cancel, nullptr, &both), Cancelled);
}

// `h3 generate --preview-dir` on 1 and 2 ranks (--count 2): the same previews (same PNG bytes) and the same latents on
// both; each video its own seed; a bad preview folder and --count 9 refused before anything loads.
TEST(PreviewCli, OneAndTwoRanksWriteTheSamePreviewsAndLatents) {
  test::ScratchDir dir;
  const std::string base =
      "--log-level warn generate --prompt 'a kite over the sea' --width 128 --height 64 --steps 5 --seed 21 --latents ";
  const auto d = dir.path();
  for (const char* ranks : {"1", "2"}) {
    const auto sub = d / (std::string("r") + ranks);
    std::filesystem::create_directories(sub);
    const test::CliResult r = test::run_h3(base + "--ranks " + ranks + " --count 2 --preview-every 2 --preview-dir " +
                                           (sub / "pv").string() + " -o " + (sub / "v.mp4").string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("seed 22"), std::string::npos) << r.out;  // the second video's seed
    for (const char* name : {"v-0-step002.png", "v-1-step002.png"})
      EXPECT_TRUE(std::filesystem::is_regular_file(sub / "pv" / name)) << ranks << " ranks: " << name;
    EXPECT_FALSE(std::filesystem::exists(sub / "pv" / "v-0-step004.png"));  // 4 calls: none after the last
    EXPECT_NE(slurp(sub / "v-1.latents.safetensors"), slurp(sub / "v-0.latents.safetensors")) << ranks;
  }
  // (With and without previews the latents are the same bits: Preview.GeneratorPreviewsChangeNothing.)
  for (const char* f :
       {"pv/v-0-step002.png", "pv/v-1-step002.png", "v-0.latents.safetensors", "v-1.latents.safetensors"})
    EXPECT_EQ(slurp(d / "r1" / f), slurp(d / "r2" / f)) << f;
  // Refused before loading: a preview folder that is a file, a count out of range.
  std::ofstream(d / "afile") << "x";
  const test::CliResult bad = test::run_h3(base + "--preview-dir " + (d / "afile").string());
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--preview-dir"), std::string::npos) << bad.out;
  const test::CliResult nine = test::run_h3(base + "--count 9");
  EXPECT_EQ(nine.status, 2) << nine.out;
  EXPECT_NE(nine.out.find("--count"), std::string::npos) << nine.out;
}

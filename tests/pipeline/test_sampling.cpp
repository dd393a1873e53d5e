// The sampling loop (pipeline/sampling.h) with the procedural mini DiT on one rank: a capture of the DiT's
// intermediates hands them over at every step, and the rows stay bitwise those of the loop without it; the rows are
// bitwise those of a plain loop that steps copies of them in place, with and without condition rows.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "model/dit/dit.h"
#include "pipeline/noise.h"
#include "pipeline/sampling.h"
#include "support/bitwise.h"

using namespace h3;

namespace {

const auto bitwise = test::same_bits;

// [cond; target] along rows, or target alone when there are no condition rows.
Tensor stack_rows(const Tensor& cond, const Tensor& target) {
  if (!cond.defined() || cond.dim(0) == 0) return target;
  Tensor out(DType::f32, {cond.dim(0) + target.dim(0), target.dim(1)});
  std::memcpy(out.raw(), cond.raw(), cond.nbytes());
  std::memcpy(static_cast<std::byte*>(out.raw()) + cond.nbytes(), target.raw(), target.nbytes());
  return out;
}

// The loop as it was before it stepped out of place, from the public pieces only (it shares no code with the loop
// but the DiT and euler_step): clone the rows, copy the velocity's target rows to f32, step the clones in place.
SamplingRows in_place_loop(const DitModel& dit, const SamplingSpec& spec, const Tensor& text, const Tensor& video_noise,
                           const Tensor& audio_rows) {
  const PackedLayout& layout = *spec.layout;
  const int64_t ncv = layout.num_condition_video_rows, nca = layout.num_condition_audio_rows;
  FlowSchedule vs, as;
  sampling_schedules(spec, vs, as);
  DitInputs in;
  in.text = text;
  in.token_tags = Tensor::from(layout.token_tags, {layout.seq_len});
  in.position_ids = layout.position_tensor();
  in.video_indices = Tensor::from(layout.video_indices, {static_cast<int64_t>(layout.video_indices.size())});
  in.audio_indices = Tensor::from(layout.audio_indices, {static_cast<int64_t>(layout.audio_indices.size())});
  in.text_indices = Tensor::from(layout.text_indices, {spec.num_text});
  SamplingRows x{patchify_video(video_noise).clone(), audio_rows.clone()};
  for (int64_t i = 0; i < vs.num_steps(); ++i) {
    const RowTimesteps plan = plan_row_timesteps(layout, vs.timesteps[i], as.timesteps[i]);
    in.video = stack_rows(spec.cond_video_rows, x.video);
    in.audio = stack_rows(spec.cond_audio_rows, x.audio);
    in.timestep = Tensor::from(plan.timestep, {static_cast<int64_t>(plan.timestep.size())});
    in.timestep_indices = Tensor::from(plan.timestep_indices, {layout.seq_len});
    const DitOutputs out = dit.forward(in);
    SamplingRows next{x.video.clone(), x.audio.clone()};
    const Tensor vv = out.video.rows(ncv, out.video.dim(0)).to(DType::f32);
    const Tensor va = out.audio.rows(nca, out.audio.dim(0)).to(DType::f32);
    euler_step(vs, i, next.video.span<float>(), vv.span<float>());
    euler_step(as, i, next.audio.span<float>(), va.span<float>());
    x = std::move(next);
  }
  return x;
}

}  // namespace

TEST(Sampling, CaptureHandsOverEveryStepAndChangesNoRow) {
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  const DitModel dit(ck, Precision::f32);
  const DitConfig& c = dit.config();
  SamplingSpec spec;
  spec.latent_frames = 2;
  spec.latent_h = spec.latent_w = 4;
  spec.audio_latents = 3;
  spec.num_text = 5;
  spec.steps = 3;
  const Tensor text = seeded_normal({spec.num_text, c.text_dim}, 11, 1);
  const Tensor video = seeded_normal({c.in_channels, spec.latent_frames, spec.latent_h, spec.latent_w}, 11, 2);
  const Tensor audio = seeded_normal({2 * spec.audio_latents, c.audio_in_channels}, 11, 3);
  std::unique_ptr<Comm> local = make_local_comm();
  const SamplingRows want = denoise_loop(dit, spec, text, video, audio, *local, {}, {}, nullptr);

  std::vector<int> steps;
  std::vector<std::vector<std::string>> names;
  spec.capture = DitCapture{{"block.0", "norm_out"}};
  spec.on_capture = [&](int step, const std::map<std::string, Tensor>& kept) {
    steps.push_back(step);
    names.emplace_back();
    for (const auto& [name, t] : kept) names.back().push_back(name);
  };
  const SamplingRows got = denoise_loop(dit, spec, text, video, audio, *local, {}, {}, nullptr);
  EXPECT_EQ(steps, (std::vector<int>{0, 1}));  // 3 grid points: 2 model calls
  for (const auto& n : names) EXPECT_EQ(n, (std::vector<std::string>{"block.0", "norm_out"}));
  EXPECT_TRUE(bitwise(got.video, want.video));
  EXPECT_TRUE(bitwise(got.audio, want.audio));
}

// The loop's rows against the in-place loop above: t2va (no condition rows) and ref2va with video and audio condition
// rows (the velocity's target rows are those after them), on an f32 run (f32 velocities, read in place) and an f64 run
// (f64 velocities, rounded to f32). The rows handed to on_step keep their values while the loop goes on.
TEST(Sampling, RowsAreThoseOfTheInPlaceEulerLoopBitwise) {
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  std::unique_ptr<Comm> local = make_local_comm();
  for (Precision p : {Precision::f32, Precision::f64}) {
    const DitModel dit(ck, p);
    const DitConfig& c = dit.config();
    for (bool refs : {false, true}) {
      SCOPED_TRACE(std::string(precision_name(p)) + (refs ? " ref2va" : " t2va"));
      SamplingSpec spec;
      spec.latent_frames = 1;
      spec.latent_h = 2;
      spec.latent_w = 6;
      spec.audio_latents = 3;
      spec.num_text = 5;
      spec.steps = 3;
      const TargetGrid grid{spec.latent_frames, spec.latent_h, spec.latent_w, spec.audio_latents};
      // A 1-frame 2x4 reference video with 2 soundtrack latents a channel: 2 video and 4 audio condition rows.
      const Reference ref{Reference::Kind::video, 1, 2, 4, 2};
      spec.layout = std::make_shared<const PackedLayout>(
          refs ? build_ref2va_layout(text_tags_with_vision(spec.num_text, {}), grid, {ref}) : t2va_layout(spec));
      if (refs) {
        ASSERT_EQ(spec.layout->num_condition_video_rows, 2);
        ASSERT_EQ(spec.layout->num_condition_audio_rows, 4);
        spec.cond_video_rows = seeded_normal({2, c.video_patch_dim()}, 13, 4);
        spec.cond_audio_rows = seeded_normal({4, c.audio_in_channels}, 13, 5);
      }
      const Tensor text = seeded_normal({spec.num_text, c.text_dim}, 13, 1);
      const Tensor video = seeded_normal({c.in_channels, spec.latent_frames, spec.latent_h, spec.latent_w}, 13, 2);
      const Tensor audio = seeded_normal({2 * spec.audio_latents, c.audio_in_channels}, 13, 3);
      std::vector<SamplingRows> held, copies;
      SamplingHooks hooks;
      hooks.on_step = [&](int, int, const SamplingRows& r) {
        held.push_back(r);
        copies.push_back({r.video.clone(), r.audio.clone()});
      };
      LoopEnd end = LoopEnd::cancelled;
      int done = 0;
      const SamplingRows got = denoise_loop(dit, spec, text, video, audio, *local, hooks, &end, &done);
      const SamplingRows want = in_place_loop(dit, spec, text, video, audio);
      EXPECT_EQ(end, LoopEnd::done);
      EXPECT_EQ(done, 2);
      EXPECT_TRUE(bitwise(got.video, want.video));
      EXPECT_TRUE(bitwise(got.audio, want.audio));
      ASSERT_EQ(held.size(), 2u);
      for (size_t k = 0; k < held.size(); ++k) {
        EXPECT_TRUE(bitwise(held[k].video, copies[k].video)) << "step " << k;
        EXPECT_TRUE(bitwise(held[k].audio, copies[k].audio)) << "step " << k;
      }
    }
  }
}

// The sampling loop (pipeline/sampling.h) with the procedural mini DiT on one rank: a capture of the DiT's
// intermediates hands them over at every step, and the rows stay bitwise those of the loop without it.
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

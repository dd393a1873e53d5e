#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "pipeline/schedule.h"

using namespace h3;

TEST(Schedule, LinspaceEndpointsAndSymmetry) {
  auto b = linspace_f32(1.0f, 0.0f, 50);
  ASSERT_EQ(b.size(), 50u);
  EXPECT_EQ(b.front(), 1.0f);
  EXPECT_EQ(b.back(), 0.0f);
  for (size_t i = 1; i < b.size(); ++i) EXPECT_LT(b[i], b[i - 1]);
  EXPECT_EQ(linspace_f32(1.0f, 0.0f, 2), (std::vector<float>{1.0f, 0.0f}));
}

TEST(Schedule, HandValues) {
  // N = 4: base = 1, 2/3, 1/3, 0; shift 12: 12b/(1+11b) -> 1, 24/25, 6/7, 0.
  FlowSchedule s = make_flow_schedule(4, 12.0);
  ASSERT_EQ(s.sigmas.size(), 4u);
  EXPECT_EQ(s.sigmas[0], 1.0f);
  EXPECT_NEAR(s.sigmas[1], 0.96f, 1e-7);
  EXPECT_NEAR(s.sigmas[2], 6.0f / 7.0f, 1e-7);
  EXPECT_EQ(s.sigmas[3], 0.0f);
  ASSERT_EQ(s.timesteps.size(), 3u);
  EXPECT_EQ(s.timesteps[0], 0.0f);
  // Spec §4 quotes the shift-12, N=50 grid's tail: ..., 0.43902, 0.33803, 0.2, 0.
  FlowSchedule v = make_flow_schedule(50, kVideoShift);
  ASSERT_EQ(v.sigmas.size(), 50u);
  EXPECT_NEAR(v.sigmas[1], 0.99827, 1e-5);
  EXPECT_NEAR(v.sigmas[47], 0.33803, 1e-5);
  EXPECT_NEAR(v.sigmas[48], 0.2, 1e-6);
  FlowSchedule a = make_flow_schedule(50, kAudioShift);
  EXPECT_NEAR(a.sigmas[48], 0.05882, 1e-5);
}

TEST(Schedule, RejectsBadArguments) {
  EXPECT_THROW(make_flow_schedule(1, 12.0), Error);
  EXPECT_THROW(make_flow_schedule(10, 0.0), Error);
  FlowSchedule s = make_flow_schedule(4, 3.0);
  std::vector<float> x(3), v(2);
  EXPECT_THROW(euler_step(s, 0, x, v), Error);
  v.resize(3);
  EXPECT_THROW(euler_step(s, 3, x, v), Error);
}

TEST(Schedule, EulerMovesTowardsData) {
  // With v = data - noise at sigma = 1 the full step to sigma_next = 0 lands on x + v.
  std::vector<float> x = {0.5f, -2.0f}, v = {1.5f, 3.0f};
  euler_step(x, v, 0.0f, 1.0f, 0.0f);
  EXPECT_FLOAT_EQ(x[0], 2.0f);
  EXPECT_FLOAT_EQ(x[1], 1.0f);
}

TEST(Schedule, GoldenSchedulesBitwise) {
  const std::string path = std::string(H3_GOLDEN_DIR) + "/layouts.safetensors";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "golden file missing: " << path;
  SafeTensors f = SafeTensors::open(path);
  int checked = 0;
  for (double shift : {12.0, 3.0})
    for (int n : {50, 20, 8, 4, 2}) {
      const std::string key = "schedule.shift" + std::to_string(static_cast<int>(shift)) + ".n" + std::to_string(n);
      if (!f.has(key + ".sigmas")) continue;
      FlowSchedule s = make_flow_schedule(n, shift);
      Tensor sig = f.get(key + ".sigmas"), ts = f.get(key + ".timesteps");
      ASSERT_EQ(sig.numel(), static_cast<int64_t>(s.sigmas.size())) << key;
      ASSERT_EQ(ts.numel(), static_cast<int64_t>(s.timesteps.size())) << key;
      for (size_t i = 0; i < s.sigmas.size(); ++i) EXPECT_EQ(sig.data<float>()[i], s.sigmas[i]) << key << " " << i;
      for (size_t i = 0; i < s.timesteps.size(); ++i) EXPECT_EQ(ts.data<float>()[i], s.timesteps[i]) << key << " " << i;
      ++checked;
    }
  EXPECT_EQ(checked, 10);
}

TEST(Schedule, GoldenEulerSteps) {
  const std::string path = std::string(H3_GOLDEN_DIR) + "/layouts.safetensors";
  if (!std::ifstream(path).good()) GTEST_SKIP() << "golden file missing: " << path;
  SafeTensors f = SafeTensors::open(path);
  // Metadata note: shift 12, 8 grid points, steps 0..2 chained from x with a fixed v.
  FlowSchedule s = make_flow_schedule(8, 12.0);
  Tensor x0 = f.get("schedule.step.x"), v = f.get("schedule.step.v");
  std::vector<float> x(x0.span<float>().begin(), x0.span<float>().end());
  for (int k = 0; k < 3; ++k) {
    euler_step(s, k, x, v.span<float>());
    Tensor want = f.get("schedule.step.x_after_" + std::to_string(k));
    for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(x[i], want.data<float>()[i]) << "step " << k << " value " << i;
  }
}

// The out-of-place step against the in-place one (itself checked against the reference above) on odd sizes, every
// step of both released schedules: the same bits, x and v untouched, nothing written past the output, and the output
// may be x itself.
TEST(Schedule, EulerIntoIsTheInPlaceStepBitwise) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (double shift : {kVideoShift, kAudioShift}) {
    const FlowSchedule s = make_flow_schedule(50, shift);
    for (size_t n : {1u, 7u, 33u, 1001u}) {
      std::vector<float> x(n), v(n);
      for (auto& e : x) e = normal(rng);
      for (auto& e : v) e = 3.0f * normal(rng);
      x[0] = -0.0f;  // a signed zero and values far apart in scale, where a reordering would show
      if (n > 2) x[1] = 1e-30f, v[2] = 1e20f;
      for (int64_t k = 0; k < s.num_steps(); ++k) {
        std::vector<float> want = x;
        euler_step(s, k, want, v);
        const std::vector<float> x_before = x, v_before = v;
        std::vector<float> out(n + 1, std::numeric_limits<float>::quiet_NaN());
        euler_step_into(s, k, std::span<float>(out.data(), n), x, v);
        ASSERT_EQ(std::memcmp(out.data(), want.data(), n * sizeof(float)), 0)
            << "shift " << shift << " n " << n << " step " << k;
        EXPECT_TRUE(std::isnan(out[n])) << "wrote past the output, n " << n;
        EXPECT_EQ(std::memcmp(x.data(), x_before.data(), n * sizeof(float)), 0);
        EXPECT_EQ(std::memcmp(v.data(), v_before.data(), n * sizeof(float)), 0);
        std::vector<float> same = x;  // out == x: the in-place step
        euler_step_into(s, k, same, same, v);
        ASSERT_EQ(std::memcmp(same.data(), want.data(), n * sizeof(float)), 0) << "aliased, n " << n << " step " << k;
        x = want;  // chain the steps as the loop does
      }
    }
  }
  std::vector<float> x(3), v(3), out(2);
  EXPECT_THROW(euler_step_into(make_flow_schedule(4, 3.0), 0, out, x, v), Error);
  out.resize(3);
  EXPECT_THROW(euler_step_into(make_flow_schedule(4, 3.0), 3, out, x, v), Error);
}

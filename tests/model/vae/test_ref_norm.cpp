// The f64 video decoder's reference-flow RMSNorm (ops/norm.h: rms_norm with NormRound::f32_in_f64, torch_cpu_sum_f32).
// Each expectation is spelled out here from ATen's sum order for one shape, written independently of the cascade code
// in src/backend/cpu/norm.cpp, and compared bitwise. The data spans 2^-12 .. 2^12 so that a different order of the same
// additions gives a different float: every case also checks that the naive left-to-right sum differs.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "ops/norm.h"
#include "ops/ops.h"

using namespace h3;

namespace {

std::vector<float> wide_values(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> e(-12.0, 12.0), m(1.0, 2.0);
  std::vector<float> v(static_cast<size_t>(n));
  for (auto& x : v) x = static_cast<float>(std::ldexp(m(rng), static_cast<int>(std::floor(e(rng)))));
  return v;
}

float left_to_right(const std::vector<float>& x) {
  float s = 0.0f;
  for (float v : x) s += v;
  return s;
}

// Sum of the 8 per-lane partials, in lane order, into a zero.
float lanes_into_zero(const std::array<float, 8>& e, float start = 0.0f) {
  float s = start;
  for (float v : e) s += v;
  return s;
}

}  // namespace

TEST(VaeRefNorm, TorchCpuSumOfFourVectorsIsPerLaneThenLaneOrder) {
  // 32 floats, 8 lanes: 4 vectors in the four accumulators, combined 0 += 1 += 2 += 3, then the lanes.
  const auto x = wide_values(32, 7);
  std::array<float, 8> e{};
  for (int l = 0; l < 8; ++l) e[l] = ((x[l] + x[8 + l]) + x[16 + l]) + x[24 + l];
  const float want = lanes_into_zero(e);
  EXPECT_EQ(ops::torch_cpu_sum_f32(x.data(), 32, 8), want);
  EXPECT_NE(left_to_right(x), want) << "data does not tell the orders apart";
  // 16 lanes (AVX-512) forms (x[l] + x[16 + l]) instead: another float on this data.
  float want16 = 0.0f;
  for (int l = 0; l < 16; ++l) want16 += x[l] + x[16 + l];
  EXPECT_EQ(ops::torch_cpu_sum_f32(x.data(), 32, 16), want16);
  EXPECT_NE(want16, want);
}

TEST(VaeRefNorm, TorchCpuSumLeftoversAndShortRows) {
  // 35 floats, 8 lanes: the 3 leftover elements go into the zero first, then the lanes.
  const auto x = wide_values(35, 2);
  std::array<float, 8> e{};
  for (int l = 0; l < 8; ++l) e[l] = ((x[l] + x[8 + l]) + x[16 + l]) + x[24 + l];
  const float want = lanes_into_zero(e, ((0.0f + x[32]) + x[33]) + x[34]);
  EXPECT_EQ(ops::torch_cpu_sum_f32(x.data(), 35, 8), want);
  EXPECT_NE(left_to_right(x), want);
  // 5 floats (< one vector): the scalar row sum, 4 accumulators, the 5th into the first.
  const auto y = wide_values(5, 3);
  const float want5 = (((y[0] + y[4]) + y[1]) + y[2]) + y[3];
  EXPECT_EQ(ops::torch_cpu_sum_f32(y.data(), 5, 8), want5);
  EXPECT_NE(left_to_right(y), want5);
}

TEST(VaeRefNorm, TorchCpuSumCascadeAtTheReleasedWidth) {
  // 2048 floats (the released decoder width), 8 lanes: 256 vectors, item (i, k) = vector 4i + k for i < 64.
  // Level 0 sums 16 items per row k, each block folded into level 1; the four rows then combine 0 += 1 += 2
  // += 3.
  const auto x = wide_values(2048, 4);
  auto vec = [&](int64_t v, int l) { return x[static_cast<size_t>(v * 8 + l)]; };
  std::array<float, 8> e{};
  for (int l = 0; l < 8; ++l) {
    std::array<float, 4> row{};
    for (int k = 0; k < 4; ++k) {
      float level1 = 0.0f;
      for (int b = 0; b < 4; ++b) {
        float block = 0.0f;
        for (int i = 16 * b; i < 16 * b + 16; ++i) block += vec(4 * i + k, l);
        level1 += block;
      }
      row[k] = level1;
    }
    e[l] = ((row[0] + row[1]) + row[2]) + row[3];
  }
  const float want = lanes_into_zero(e);
  EXPECT_EQ(ops::torch_cpu_sum_f32(x.data(), 2048, 8), want);
  EXPECT_NE(left_to_right(x), want);
}

TEST(VaeRefNorm, RmsNormViaF32RoundsWhereTheReferenceDoes) {
  // [64 rows, 2 groups of 16] with a weight of 16 (the mini decoder's head width), eps 1e-5.
  const int64_t rows = 64, cols = 32, group = 16;
  std::mt19937_64 rng(5);
  std::normal_distribution<double> nd(0.0, 3.0);
  std::vector<double> xv(rows * cols), wv(group);
  for (auto& v : xv) v = nd(rng) * std::ldexp(1.0, static_cast<int>(rng() % 9) - 4);  // not f32 values
  for (auto& v : wv) v = 1.0 + 0.1 * nd(rng);
  const Tensor x = Tensor::from(xv, {rows, cols}), w = Tensor::from(wv, {group});
  const double eps = 1e-5;
  const Tensor got = ops::rms_norm(x, &w, group, eps, ops::NormRound::f32_in_f64);
  const Tensor got_plain = ops::rms_norm(x, nullptr, group, eps, ops::NormRound::f32_in_f64);
  const Tensor f64 = ops::rms_norm(x, &w, group, eps);
  ASSERT_EQ(got.dtype(), DType::f64);
  ASSERT_EQ(got.shape(), x.shape());
  double max_rel_to_f64 = 0.0;
  int64_t lane_order_matters = 0;  // outputs that a left-to-right sum (16 lanes) would change
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < cols; g += group) {
      float xf[16], sq[16];
      for (int c = 0; c < 16; ++c) {
        xf[c] = static_cast<float>(xv[r * cols + g + c]);
        sq[c] = xf[c] * xf[c];
      }
      float s = 0.0f,
            s16 = 0.0f;  // 16 floats in 8 lanes: (sq[l] + sq[8 + l]) in lane order; 16 lanes: in order
      for (int l = 0; l < 8; ++l) s += sq[l] + sq[8 + l];
      for (int c = 0; c < 16; ++c) s16 += sq[c];
      const float inv = 1.0f / std::sqrt(s / 16.0f + static_cast<float>(eps));
      const float inv16 = 1.0f / std::sqrt(s16 / 16.0f + static_cast<float>(eps));
      for (int c = 0; c < 16; ++c) {
        const int64_t i = r * cols + g + c;
        const float n = xf[c] * inv;
        EXPECT_EQ(got_plain.data<double>()[i], static_cast<double>(n)) << i;
        const double want = static_cast<double>(static_cast<float>(static_cast<double>(n) * wv[c]));
        EXPECT_EQ(got.data<double>()[i], want) << i;
        if (xf[c] * inv16 != n) ++lane_order_matters;
        const double ref = f64.data<double>()[i];
        max_rel_to_f64 = std::max(max_rel_to_f64, std::abs(got.data<double>()[i] - ref) / std::abs(ref));
      }
    }
  EXPECT_GT(lane_order_matters, 0) << "data does not tell the sum orders apart";
  // The f32 steps are visible against the all-f64 norm, and bounded by a few f32 roundings.
  EXPECT_GT(max_rel_to_f64, 1e-9);
  EXPECT_LT(max_rel_to_f64, 1e-6);
  EXPECT_THROW(ops::rms_norm(x.to(DType::f32), &w, group, eps, ops::NormRound::f32_in_f64), Error);
}

TEST(VaeRefNorm, RmsNormViaF32TransformersWeightStaysF64) {
  // transformers' Qwen3 RMSNorm in an f64 run (the text tower's f64 path): the f32 x * rsqrt is cast to f64
  // and then multiplied by the f64 weight, with no rounding back to f32. Groups of 8 (the q/k norms of the
  // mini text tower) and 32 (its hidden norms); the sum order itself is checked by the tests above.
  for (const int64_t group : {int64_t{8}, int64_t{32}}) {
    const int64_t rows = 40, cols = 2 * group;
    std::mt19937_64 rng(11 + group);
    std::normal_distribution<double> nd(0.0, 2.0);
    std::vector<double> xv(rows * cols), wv(group);
    for (auto& v : xv) v = nd(rng);  // not f32 values: the input rounding is part of the flow
    for (auto& v : wv) v = 1.0 + 0.1 * nd(rng);
    const Tensor x = Tensor::from(xv, {rows, cols}), w = Tensor::from(wv, {group});
    const double eps = 1e-6;
    const Tensor got = ops::rms_norm(x, &w, group, eps, ops::NormRound::f32_in_f64_weight_f64);
    const Tensor vae = ops::rms_norm(x, &w, group, eps, ops::NormRound::f32_in_f64);
    ASSERT_EQ(got.dtype(), DType::f64);
    int64_t differs_from_vae = 0, not_f32 = 0;
    std::vector<float> xf(static_cast<size_t>(group)), sq(static_cast<size_t>(group));
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t g = 0; g < cols; g += group) {
        for (int64_t c = 0; c < group; ++c) {
          xf[c] = static_cast<float>(xv[r * cols + g + c]);
          sq[c] = xf[c] * xf[c];
        }
        const float mean =
            ops::torch_cpu_sum_f32(sq.data(), group, ops::kReferenceSumLanes) / static_cast<float>(group);
        const float inv = 1.0f / std::sqrt(mean + static_cast<float>(eps));
        for (int64_t c = 0; c < group; ++c) {
          const int64_t i = r * cols + g + c;
          const double want = wv[c] * static_cast<double>(xf[c] * inv);
          EXPECT_EQ(got.data<double>()[i], want) << "group " << group << " element " << i;
          if (got.data<double>()[i] != vae.data<double>()[i]) ++differs_from_vae;
          if (static_cast<double>(static_cast<float>(got.data<double>()[i])) != got.data<double>()[i]) ++not_f32;
        }
      }
    // The two cast points must give different bits (else this test could not tell them apart).
    EXPECT_GT(differs_from_vae, rows) << "group " << group;
    EXPECT_GT(not_f32, rows) << "group " << group;
  }
}

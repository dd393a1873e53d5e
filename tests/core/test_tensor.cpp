// Tensor's quantization metadata: an fp8 tensor's scale and head norm bound travel with its views and copies the
// same way (FP8 attention reads both; backend/cuda/attention_ops.cpp).
#include "core/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace h3 {
namespace {

TEST(Tensor, HeadNormBoundTravelsWithTheScale) {
  const Tensor t = Tensor::from(std::vector<float>(12, 1.0f), {3, 4}).to(DType::fp8_e4m3);
  EXPECT_EQ(t.head_norm_bound(), 0.0f) << "unknown unless set";
  const Tensor b = t.with_scale(Tensor::from(std::vector<float>{0.5f}, {1})).with_head_norm_bound(118.5f);
  EXPECT_EQ(b.head_norm_bound(), 118.5f);
  ASSERT_NE(b.scale(), nullptr);
  EXPECT_EQ(b.scale()->data<float>()[0], 0.5f) << "setting the bound keeps the scale";
  EXPECT_EQ(b.with_scale(Tensor::from(std::vector<float>{2.0f}, {1})).head_norm_bound(), 118.5f);
  EXPECT_EQ(b.reshape({4, 3}).head_norm_bound(), 118.5f);
  EXPECT_EQ(b.to_device(Device::cpu).head_norm_bound(), 118.5f);
  // Dropped where the scale is: a conversion makes other values, and rows() views carry neither.
  EXPECT_EQ(b.to(DType::f32).head_norm_bound(), 0.0f);
  EXPECT_EQ(b.rows(0, 2).head_norm_bound(), 0.0f);
  EXPECT_EQ(b.rows(0, 2).scale(), nullptr);
  EXPECT_THROW(t.with_head_norm_bound(-1.0f), Error);
  EXPECT_THROW(t.with_head_norm_bound(std::numeric_limits<float>::quiet_NaN()), Error);
  EXPECT_THROW(t.with_head_norm_bound(std::numeric_limits<float>::infinity()), Error);
}

}  // namespace
}  // namespace h3

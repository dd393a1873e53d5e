#include <gtest/gtest.h>
#include "core/dtype.h"
TEST(DType, Bf16RoundTrip) {
  EXPECT_EQ(h3::bf16_to_f32(h3::f32_to_bf16(1.0f)), 1.0f);
}

// The exchange buffers of distributed/host_stage.h on the CPU (no GPU backend: plain host memory): each slot keeps
// its buffer while it is large enough, grows when asked for more, and the two slots never share memory.
#include <gtest/gtest.h>

#include "core/error.h"
#include "distributed/host_stage.h"

TEST(HostStage, SlotsKeepTheirBufferAndGrowOnlyWhenAsked) {
  h3::HostStage stage;
  const h3::Tensor a = stage.view(0, h3::DType::bf16, {300, 7});
  const h3::Tensor b = stage.view(1, h3::DType::bf16, {600, 7});
  ASSERT_EQ(a.shape(), (h3::Shape{300, 7}));
  EXPECT_EQ(a.dtype(), h3::DType::bf16);
  EXPECT_FALSE(a.on_device());
  EXPECT_NE(a.raw(), b.raw());
  EXPECT_EQ(stage.bytes(), size_t{900 * 7 * 2});
  // Smaller or equal (any dtype and shape of no more bytes): the same memory.
  EXPECT_EQ(stage.view(0, h3::DType::f32, {150, 7}).raw(), a.raw());
  EXPECT_EQ(stage.bytes(), size_t{900 * 7 * 2});
  // Larger: a new buffer of the new size.
  const h3::Tensor c = stage.view(0, h3::DType::f32, {301, 7});
  EXPECT_EQ(c.numel(), 301 * 7);
  EXPECT_EQ(stage.bytes(), size_t{301 * 7 * 4 + 600 * 7 * 2});
  static_cast<float*>(c.raw())[c.numel() - 1] = 1.5f;  // writable to its end
  EXPECT_EQ(stage.view(1, h3::DType::bf16, {600, 7}).raw(), b.raw());
}

TEST(HostStage, OnlyDeviceTensorsAreCopiedIn) {
  h3::HostStage stage;
  EXPECT_THROW(stage.copy_in(0, h3::Tensor(h3::DType::bf16, {4, 4})), h3::Error);
  EXPECT_THROW(stage.view(2, h3::DType::bf16, {4}), h3::Error);
}

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.h"
#include "core/finite.h"
#include "core/tensor.h"

TEST(DType, Bf16RoundTrip) {
  EXPECT_EQ(h3::bf16_to_f32(h3::f32_to_bf16(1.0f)), 1.0f);
}

// Non-finite values from bit patterns (core/finite.h), in every float dtype, across the parallel chunks.
TEST(Finite, EveryFloatDtypeAndChunkBoundaries) {
  using h3::DType;
  using h3::Tensor;
  const int64_t n = (1 << 19) * 3 + 5;  // three full scan chunks and a ragged one
  auto check = [&](DType dt, auto bad_bits, auto finite_bits, const char* what) {
    using U = decltype(bad_bits);
    Tensor t(dt, {n});
    U* p = static_cast<U*>(t.raw());
    for (int64_t i = 0; i < n; ++i) p[i] = finite_bits;
    EXPECT_EQ(h3::find_non_finite(t).count, 0) << what;
    EXPECT_EQ(h3::find_non_finite(t).first, -1) << what;
    for (int64_t i : {n - 1, (int64_t{1} << 19) + 7, int64_t{(1 << 19) * 2 - 1}}) p[i] = bad_bits;
    const h3::NonFinite r = h3::find_non_finite(t);
    EXPECT_EQ(r.count, 3) << what;
    EXPECT_EQ(r.first, (1 << 19) + 7) << what;
  };
  auto f32_bits = [](float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
  };
  auto f64_bits = [](double d) {
    uint64_t u;
    std::memcpy(&u, &d, 8);
    return u;
  };
  check(DType::f32, f32_bits(std::numeric_limits<float>::infinity()), f32_bits(3.4e38f), "f32 +Inf");
  check(DType::f32, f32_bits(-std::nanf("")), f32_bits(-1.5f), "f32 -NaN");
  check(DType::f64, f64_bits(-std::numeric_limits<double>::infinity()), f64_bits(1.7e308), "f64 -Inf");
  check(DType::bf16, uint16_t{0x7fc0}, uint16_t{0x7f7f}, "bf16 NaN beside the largest finite");
  check(DType::bf16, uint16_t{0xff80}, uint16_t{0x8001}, "bf16 -Inf");
  check(DType::f16, uint16_t{0x7c00}, uint16_t{0x7bff}, "f16 Inf beside 65504");
  check(DType::fp8_e4m3, uint8_t{0xff}, uint8_t{0x7e}, "fp8 e4m3 -NaN beside 448");
  check(DType::fp8_e4m3, uint8_t{0x7f}, uint8_t{0xfe}, "fp8 e4m3 NaN beside -448");
  // Integers hold none, whatever their bits.
  Tensor ints(DType::i32, {4});
  std::memset(ints.raw(), 0xff, ints.nbytes());
  EXPECT_EQ(h3::find_non_finite(ints).count, 0);
}

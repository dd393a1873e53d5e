#include "core/dtype.h"

#include <bit>
#include <cmath>

#include "core/error.h"
#include "core/names.h"

namespace h3 {

namespace {
struct DTypeInfo {
  DType t;
  size_t size;
  std::string_view name;
  std::string_view st_name;
};
constexpr DTypeInfo kInfo[] = {
    {DType::f64, 8, "f64", "F64"},
    {DType::f32, 4, "f32", "F32"},
    {DType::bf16, 2, "bf16", "BF16"},
    {DType::f16, 2, "f16", "F16"},
    {DType::fp8_e4m3, 1, "fp8_e4m3", "F8_E4M3"},
    {DType::i64, 8, "i64", "I64"},
    {DType::i32, 4, "i32", "I32"},
    {DType::i8, 1, "i8", "I8"},
    {DType::u8, 1, "u8", "U8"},
};
const DTypeInfo& info(DType t) {
  for (const auto& i : kInfo)
    if (i.t == t) return i;
  H3_ASSERT(false, "unknown dtype {}", static_cast<int>(t));
}
}  // namespace

size_t dtype_size(DType t) {
  return info(t).size;
}
std::string_view dtype_name(DType t) {
  return info(t).name;
}
std::string_view dtype_safetensors_name(DType t) {
  return info(t).st_name;
}
std::optional<DType> dtype_from_safetensors(std::string_view s) {
  for (const auto& i : kInfo)
    if (i.st_name == s) return i.t;
  return std::nullopt;
}
bool dtype_is_float(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::f16 || t == DType::fp8_e4m3;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = (h & 0x8000u) << 16;
  int exp = (h >> 10) & 0x1f;
  uint32_t mant = h & 0x3ffu;
  float v;
  if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -24);
  } else if (exp == 31) {
    v = mant ? std::nanf("") : INFINITY;
  } else {
    v = std::ldexp(static_cast<float>(mant | 0x400u), exp - 25);
  }
  return std::bit_cast<float>(std::bit_cast<uint32_t>(v) | sign);
}

uint16_t f32_to_f16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00;
  if (a >= 65520.0f) return sign | 0x7c00;  // rounds to infinity
  if (a < std::ldexp(1.0f, -14)) {          // subnormal: multiples of 2^-24, round half even via rint
    return sign | static_cast<uint16_t>(std::nearbyint(std::ldexp(a, 24)));
  }
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  // 11 significant bits: quantum 2^(e-11)
  float q = std::nearbyint(std::ldexp(a, 11 - e));  // in [1024, 2048]
  int exp16 = e - 1 + 15;
  uint32_t mant = static_cast<uint32_t>(q);
  if (mant == 2048) {
    mant = 1024;
    exp16 += 1;
  }
  if (exp16 >= 31) return sign | 0x7c00;
  return sign | static_cast<uint16_t>((exp16 << 10) | (mant - 1024));
}

float fp8e4m3_to_f32(uint8_t v) {
  float sign = (v & 0x80) ? -1.0f : 1.0f;
  int exp = (v >> 3) & 0xf;
  int mant = v & 0x7;
  if (exp == 0xf && mant == 0x7) return std::nanf("");
  if (exp == 0) return sign * std::ldexp(static_cast<float>(mant), -9);
  return sign * std::ldexp(static_cast<float>(mant | 8), exp - 10);
}

uint8_t f32_to_fp8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t sign = std::signbit(f) ? 0x80 : 0;
  float a = std::fmin(std::fabs(f), 448.0f);
  if (a < std::ldexp(1.0f, -6)) {  // subnormal: multiples of 2^-9
    return sign | static_cast<uint8_t>(std::nearbyint(std::ldexp(a, 9)));
  }
  int e;
  std::frexp(a, &e);
  float q = std::nearbyint(std::ldexp(a, 4 - e));  // 4 significant bits, in [8, 16]
  int exp8 = e - 1 + 7;
  int mant = static_cast<int>(q);
  if (mant == 16) {
    mant = 8;
    exp8 += 1;
  }
  if (exp8 > 15 || (exp8 == 15 && mant - 8 > 6)) return sign | 0x7e;  // saturate at 448
  return sign | static_cast<uint8_t>((exp8 << 3) | (mant - 8));
}

namespace {
constexpr std::array<Named<Precision>, 4> kPrecisionNames{
    {{Precision::f64, "f64"}, {Precision::f32, "f32"}, {Precision::bf16, "bf16"}, {Precision::fp8, "fp8"}}};
}  // namespace

std::string_view precision_name(Precision p) {
  return name_in(kPrecisionNames, p);
}

Precision precision_from_name(const std::string& s) {
  return value_in(kPrecisionNames, s, "precision", "f64, f32, bf16; fp8 on the GPU");
}

}  // namespace h3

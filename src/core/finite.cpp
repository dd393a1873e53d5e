// Non-finite values found from bit patterns (core/finite.h).
#include "core/finite.h"

#include <algorithm>
#include <mutex>

#include "core/error.h"
#include "core/parallel.h"

namespace h3 {

namespace {

// Elements per parallel chunk: large enough that the pool's overhead is noise (1 MiB of bf16).
constexpr int64_t kChunk = 1 << 19;

// A value is non-finite when all bits under `mask` (the exponent; fp8 e4m3: exponent and mantissa) are set.
template <typename U>
NonFinite scan_serial(const U* p, int64_t n, U mask) {
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += (p[i] & mask) == mask;  // branch-free: vectorizes
  if (count == 0) return {};
  int64_t first = 0;
  while ((p[first] & mask) != mask) ++first;
  return {count, first};
}

template <typename U>
NonFinite scan(const U* p, int64_t n, U mask) {
  NonFinite out;
  std::mutex mu;
  parallel_for((n + kChunk - 1) / kChunk,
               [&](int64_t c0, int64_t c1) {
                 const int64_t b = c0 * kChunk, e = std::min(n, c1 * kChunk);
                 const NonFinite part = scan_serial(p + b, e - b, mask);
                 if (part.count == 0) return;
                 std::lock_guard lock(mu);
                 out.count += part.count;
                 if (out.first < 0 || b + part.first < out.first) out.first = b + part.first;
               },
               1);
  return out;
}

// Calls f(pointer, mask) with the dtype's unsigned view and non-finite mask; integers: no call (always finite).
template <typename F>
NonFinite by_dtype(DType dtype, const void* data, F&& f) {
  switch (dtype) {
    case DType::f64:
      return f(static_cast<const uint64_t*>(data), uint64_t{0x7ff0000000000000ull});
    case DType::f32:
      return f(static_cast<const uint32_t*>(data), uint32_t{0x7f800000u});
    case DType::bf16:
      return f(static_cast<const uint16_t*>(data), uint16_t{0x7f80u});
    case DType::f16:
      return f(static_cast<const uint16_t*>(data), uint16_t{0x7c00u});
    case DType::fp8_e4m3:
      return f(static_cast<const uint8_t*>(data), uint8_t{0x7fu});
    default:
      return {};
  }
}

}  // namespace

NonFinite find_non_finite(const Tensor& t) {
  H3_CHECK(!t.on_device(), "find_non_finite: {} is on a device; copy it to the host first", t.describe());
  const int64_t n = t.numel();
  if (n == 0) return {};
  return by_dtype(t.dtype(), t.raw(), [&](const auto* p, auto mask) { return scan(p, n, mask); });
}

NonFinite find_non_finite(DType dtype, const void* data, int64_t n) {
  if (n <= 0) return {};
  return by_dtype(dtype, data, [&](const auto* p, auto mask) { return scan_serial(p, n, mask); });
}

}  // namespace h3

// FNV-1a (64-bit): the one hash of the engine for content keys, agreement checks, digests and procedural weight
// names. Not cryptographic. Offset basis 0xcbf29ce484222325, prime 0x100000001b3 (the published FNV-1a 64).
#pragma once
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>

namespace h3 {

inline constexpr uint64_t kFnvOffset = 0xcbf29ce484222325ull;
inline constexpr uint64_t kFnvPrime = 0x100000001b3ull;

// Byte-wise FNV-1a of n bytes, continuing from `h`.
inline uint64_t fnv1a(const void* p, size_t n, uint64_t h = kFnvOffset) {
  const auto* c = static_cast<const unsigned char*>(p);
  for (size_t i = 0; i < n; ++i) {
    h ^= c[i];
    h *= kFnvPrime;
  }
  return h;
}
inline uint64_t fnv1a(std::string_view s, uint64_t h = kFnvOffset) {
  return fnv1a(s.data(), s.size(), h);
}

// FNV-1a over several fields in turn (a digest of a record).
struct Fnv1a {
  uint64_t h = kFnvOffset;
  void bytes(const void* p, size_t n) { h = fnv1a(p, n, h); }
  // The string with its terminating NUL, so that ("ab", "c") and ("a", "bc") differ.
  void str(std::string_view s) {
    bytes(s.data(), s.size());
    bytes("", 1);
  }
  void f64(double v) { bytes(&v, sizeof(v)); }
};

// The word-wise variant for large buffers: 8-byte words (host byte order) folded in whole, the tail byte-wise.
// Not the same value as fnv1a() of the same bytes; for in-process cache keys only.
inline uint64_t fnv1a_words(const void* p, size_t bytes) {
  uint64_t h = kFnvOffset;
  const auto* b = static_cast<const uint8_t*>(p);
  size_t i = 0;
  for (; i + 8 <= bytes; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    h = (h ^ w) * kFnvPrime;
  }
  for (; i < bytes; ++i) h = (h ^ b[i]) * kFnvPrime;
  return h;
}

}  // namespace h3

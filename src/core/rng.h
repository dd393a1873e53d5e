// The counter-based generator behind every seeded value h3 makes (the initial noise, procedural weights): splitmix64
// of a counter, so element i of a stream is computed alone, in any order and on any device, the same on every
// machine.
#pragma once
#include <cstdint>

namespace h3 {

constexpr uint64_t splitmix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace h3

// A growing-size property for tests of parsers: the work of size 8n takes well under 64 times the work of size n
// (quadratic) on any machine, busy or not, when it is linear (8 times). Best of three runs each.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <functional>
#include <string>

namespace h3::test {

// The shortest of `runs` runs of fn, in seconds.
inline double best_seconds(const std::function<void()>& fn, int runs = 3) {
  double best = 1e30;
  for (int i = 0; i < runs; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Expects run(8 n) to take less than 24 x run(n) (+ 50 ms of timer and allocator noise): a linear run takes 8 x,
// a quadratic one 64 x. `n` should make run(n) take a few milliseconds. Up to three tries, the first that holds
// passing: another process taking the cores for a moment can slow a linear run, never speed up a quadratic one.
inline void expect_linear(const std::function<void(size_t)>& run, size_t n, const std::string& what) {
  double small = 0, large = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    small = best_seconds([&] { run(n); });
    large = best_seconds([&] { run(8 * n); });
    if (large < 24 * small + 0.05) return;
  }
  ADD_FAILURE() << what << ": size " << n << " took " << small << " s, size " << 8 * n << " took " << large
                << " s (linear would be about 8 x)";
}

}  // namespace h3::test

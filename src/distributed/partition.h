// The partition rule for any world size: rank r of n over m items owns [r*q + min(r, m mod n), +q (+1 if r < m mod n))
// with q = m div n. 56 heads over 6 ranks = 10,10,9,9,9,9. Empty parts are refused: every rank must own something.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace h3 {

struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};

// Part `r` of `m` items split over `n` parts.
Range part_of(int64_t m, int n, int r);
// All parts; throws (naming `what`) when n < 1 or some part would be empty (n > m).
std::vector<Range> partition(int64_t m, int n, const std::string& what);
std::vector<int64_t> part_sizes(const std::vector<Range>& parts);

}  // namespace h3

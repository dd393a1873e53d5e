#include "distributed/partition.h"

#include <algorithm>

#include "core/error.h"

namespace h3 {

Range part_of(int64_t m, int n, int r) {
  const int64_t q = m / n, rem = m % n;
  const int64_t begin = r * q + std::min<int64_t>(r, rem);
  return {begin, begin + q + (r < rem ? 1 : 0)};
}

std::vector<Range> partition(int64_t m, int n, const std::string& what) {
  if (n < 1) fail("cannot split {} over {} ranks", what, n);
  if (m < n)
    fail("cannot split {} {} over {} ranks: some rank would get none (use at most {} ranks for this split)", m, what, n,
         m);
  std::vector<Range> parts;
  for (int r = 0; r < n; ++r) parts.push_back(part_of(m, n, r));
  return parts;
}

std::vector<int64_t> part_sizes(const std::vector<Range>& parts) {
  std::vector<int64_t> s;
  for (const auto& p : parts) s.push_back(p.size());
  return s;
}

}  // namespace h3

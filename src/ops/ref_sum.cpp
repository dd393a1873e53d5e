// torch_cpu_sum_f32 (ops/norm.h): ATen's CPU float sum, order for order. A plain function of floats, no backend.
#include <algorithm>
#include <array>

#include "core/error.h"
#include "ops/norm.h"

namespace h3::ops {

namespace {

constexpr int kMaxLanes = 16;
using Lanes = std::array<float, kMaxLanes>;

// ATen's utils::CeilLog2 (1 for x <= 2).
int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v; v >>= 1) ++bits;
  return bits;
}

// ATen's multi_row_sum over `size` items of four interleaved rows: item (i, k) is the `lanes` floats at
// x + (i * 4 + k) * lanes. Four cascade levels of accumulators; level j - 1 is folded into level j after
// every 2^p items while the item count's bits above level j - 1 are zero.
std::array<Lanes, 4> multi_row_sum(const float* x, int64_t size, int lanes) {
  constexpr int levels = 4, rows = 4;
  const int64_t power = std::max<int64_t>(4, ceil_log2(size) / levels), step = int64_t{1} << power, mask = step - 1;
  std::array<std::array<Lanes, rows>, levels> acc{};
  auto add_item = [&](Lanes& a, int64_t i, int64_t k) {
    const float* p = x + (i * rows + k) * lanes;
    for (int l = 0; l < lanes; ++l) a[l] += p[l];
  };
  int64_t i = 0;
  while (i + step <= size) {
    for (int64_t j = 0; j < step; ++j, ++i)
      for (int k = 0; k < rows; ++k) add_item(acc[0][k], i, k);
    for (int j = 1; j < levels; ++j) {
      for (int k = 0; k < rows; ++k) {
        for (int l = 0; l < lanes; ++l) acc[j][k][l] += acc[j - 1][k][l];
        acc[j - 1][k].fill(0.0f);
      }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < size; ++i)
    for (int k = 0; k < rows; ++k) add_item(acc[0][k], i, k);
  for (int j = 1; j < levels; ++j)
    for (int k = 0; k < rows; ++k)
      for (int l = 0; l < lanes; ++l) acc[0][k][l] += acc[j][k][l];
  return acc[0];
}

// ATen's row_sum over `size` items of `lanes` floats: four interleaved partial sums, the leftover items into
// the first, then the first += the other three.
Lanes row_sum(const float* x, int64_t size, int lanes) {
  const int64_t size_ilp = size / 4;
  std::array<Lanes, 4> part = multi_row_sum(x, size_ilp, lanes);
  for (int64_t i = size_ilp * 4; i < size; ++i)
    for (int l = 0; l < lanes; ++l) part[0][l] += x[i * lanes + l];
  for (int k = 1; k < 4; ++k)
    for (int l = 0; l < lanes; ++l) part[0][l] += part[k][l];
  return part[0];
}

}  // namespace

float torch_cpu_sum_f32(const float* x, int64_t n, int lanes) {
  H3_ASSERT(lanes >= 1 && lanes <= kMaxLanes && n >= 0, "torch_cpu_sum_f32: {} elements, {} lanes (1..{})", n, lanes,
            kMaxLanes);
  if (n < lanes) return row_sum(x, n, 1)[0];  // ATen's scalar inner sum
  const int64_t vecs = n / lanes;
  const Lanes v = row_sum(x, vecs, lanes);
  float total = 0.0f;
  for (int64_t k = vecs * lanes; k < n; ++k) total += x[k];
  for (int l = 0; l < lanes; ++l) total += v[l];
  return total;
}

}  // namespace h3::ops

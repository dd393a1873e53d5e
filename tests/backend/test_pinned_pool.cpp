// The page-locked host pool's rules (backend/pinned_pool.h) over a counting allocator: what a request's models reuse,
// what a model of another size frees first, and that host memory never exceeds what the same sequence holds without
// the pool.
#include <gtest/gtest.h>

#include <cstddef>
#include <map>
#include <vector>

#include "backend/pinned_pool.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Host memory as a pool would see it: live blocks by address, the total and its peak.
struct FakeHost {
  std::map<void*, size_t> live;
  size_t bytes = 0, peak = 0;
  int allocs = 0, frees = 0;
  std::vector<std::byte*> owned;
  ~FakeHost() {
    for (std::byte* p : owned) delete[] p;
  }
  h3::PinnedPool pool() {
    return h3::PinnedPool(
        [this](size_t n) {
          auto* p = new std::byte[1];
          owned.push_back(p);
          live[p] = n;
          bytes += n;
          peak = std::max(peak, bytes);
          allocs += 1;
          return static_cast<void*>(p);
        },
        [this](void* p) {
          bytes -= live.at(p);
          live.erase(p);
          frees += 1;
        });
  }
};

// Without the pool: allocate each layer of a model, free them all, then the next model's.
size_t peak_without_pool(const std::vector<std::pair<int, size_t>>& models) {
  size_t peak = 0;
  for (const auto& [n, size] : models) peak = std::max(peak, static_cast<size_t>(n) * size);
  return peak;
}

// A model's `n` layer records of `bytes` each, taken from the pool as it loads.
std::vector<void*> take_records(h3::PinnedPool& pool, int n, size_t bytes) {
  std::vector<void*> records;
  for (int i = 0; i < n; ++i) records.push_back(pool.take(bytes));
  return records;
}

// A model's records given back at the end of its phase.
void give_records(h3::PinnedPool& pool, const std::vector<void*>& records) {
  for (void* p : records) pool.give(p);
}

}  // namespace

// The text tower's 33 layer records (975 MB at the released size) serve the FP8 DiT's 33 block records (906 MB):
// no allocation, no free between the phases; the request's end frees them.
TEST(PinnedPool, TheDitReusesTheTextTowersRecords) {
  FakeHost host;
  h3::PinnedPool pool = host.pool();
  give_records(pool, take_records(pool, 33, 975 * kMiB));  // the text tower's
  EXPECT_EQ(host.frees, 0);
  const std::vector<void*> dit = take_records(pool, 33, 906 * kMiB);
  EXPECT_EQ(host.allocs, 33);
  EXPECT_EQ(pool.stats().reused, 33);
  EXPECT_EQ(host.peak, 33 * 975 * kMiB);
  give_records(pool, dit);
  const h3::PinnedPoolStats s = pool.trim();
  EXPECT_EQ(s.allocated, 33);
  EXPECT_EQ(s.reused, 33);
  EXPECT_EQ(s.freed, 33);
  EXPECT_EQ(host.bytes, 0u);
  EXPECT_EQ(pool.stats().reused, 0);  // counts start again after a trim
}

// A bf16 DiT's 1.29 GB blocks do not fit the 975 MB records: its first block frees every kept one before it
// allocates, so host memory peaks at the larger model, as without the pool.
TEST(PinnedPool, ALargerModelFreesTheKeptBlocksFirst) {
  FakeHost host;
  h3::PinnedPool pool = host.pool();
  give_records(pool, take_records(pool, 33, 975 * kMiB));  // the text tower's
  const std::vector<void*> dit = take_records(pool, 43, 1290 * kMiB);
  EXPECT_EQ(host.frees, 33);
  EXPECT_EQ(pool.stats().reused, 0);
  EXPECT_EQ(host.peak, peak_without_pool({{33, 975 * kMiB}, {43, 1290 * kMiB}}));
  // Blocks more than a quarter larger than asked are not handed out: a smaller model after it frees them first too.
  give_records(pool, dit);
  void* small = pool.take(975 * kMiB);
  EXPECT_EQ(host.frees, 33 + 43);
  EXPECT_EQ(host.bytes, 975 * kMiB);
  pool.give(small);
}

// Staging buffers (small) neither take a large kept block nor free one; equal small sizes are reused.
TEST(PinnedPool, SmallBuffersLeaveLargeBlocksAlone) {
  FakeHost host;
  h3::PinnedPool pool = host.pool();
  void* big = pool.take(975 * kMiB);
  pool.give(big);
  void* a = pool.take(64 * kMiB);
  void* b = pool.take(64 * kMiB);
  EXPECT_EQ(host.frees, 0);
  EXPECT_EQ(host.allocs, 3);
  pool.give(a);
  pool.give(b);
  void* c = pool.take(60 * kMiB);  // within a quarter: reused
  EXPECT_EQ(host.allocs, 3);
  EXPECT_EQ(pool.take(975 * kMiB), big);
  pool.give(c);
  pool.give(big);
  EXPECT_EQ(pool.trim().freed, 3);
  EXPECT_EQ(host.bytes, 0u);
}

TEST(PinnedPool, GivingBackABlockItDidNotHandOutIsAnError) {
  FakeHost host;
  h3::PinnedPool pool = host.pool();
  int x = 0;
  EXPECT_ANY_THROW(pool.give(&x));
  pool.give(nullptr);  // as free(nullptr)
}

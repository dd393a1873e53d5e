// The GPU caching allocator's rules (backend/block_pool.h) over a fake device: a forward's repeating pattern of
// tensors of several sizes runs at the cap without giving segments back once the first pass has shaped them (the
// exact-size cache did it several times a block), splits and merges keep every live block inside its segment and
// apart from the others, and the refusals say why.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <map>
#include <random>
#include <vector>

#include "backend/block_pool.h"

namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Device memory as the pool sees it: segments at distinct, well-spaced addresses (never dereferenced).
struct FakeDevice {
  std::map<uintptr_t, size_t> live;
  uintptr_t next = uintptr_t{1} << 40;
  int64_t bytes = 0, peak = 0, limit = INT64_MAX;
  int allocs = 0, frees = 0;
  h3::BlockPool pool(int64_t cap) {
    return h3::BlockPool(
        [this](size_t n) -> void* {
          if (bytes + static_cast<int64_t>(n) > limit) return nullptr;
          const uintptr_t p = next;
          next += (n + (size_t{1} << 30)) & ~((size_t{1} << 30) - 1);  // a gap after each segment
          live[p] = n;
          bytes += static_cast<int64_t>(n);
          peak = std::max(peak, bytes);
          allocs += 1;
          return reinterpret_cast<void*>(p);
        },
        [this](void* p) {
          bytes -= static_cast<int64_t>(live.at(reinterpret_cast<uintptr_t>(p)));
          live.erase(reinterpret_cast<uintptr_t>(p));
          frees += 1;
        },
        cap);
  }
};

void* must_alloc(h3::BlockPool& pool, size_t bytes) {
  h3::BlockPool::Refusal why = h3::BlockPool::Refusal::none;
  void* p = pool.alloc(bytes, &why);
  EXPECT_NE(p, nullptr) << "refused " << bytes << " bytes (" << static_cast<int>(why) << ")";
  return p;
}

// One block of a DiT forward at a budget's cap, its shape (scaled down): the attention's six row-sized tensors
// (normed input, q, k, v, output, projection) live together, then the MLP's one wide hidden of six rows.
void dit_block(h3::BlockPool& pool) {
  const size_t row = 100 * kMiB;
  std::vector<void*> attention;
  for (int i = 0; i < 6; ++i) attention.push_back(must_alloc(pool, row));
  void* scales = must_alloc(pool, 4096);
  for (void* p : attention) pool.free(p);
  void* hidden = must_alloc(pool, 6 * row);
  pool.free(scales);
  pool.free(hidden);
}

TEST(BlockPool, AForwardAtTheCapGivesNothingBackOnceShaped) {
  FakeDevice dev;
  // The residual stream, the block's 600 MiB and a small segment, with 48 MiB to spare: the attention's six rows and
  // the MLP's hidden cannot have segments of their own side by side. The exact-size cache gave the hidden's block
  // back for the rows and the rows' blocks back for the hidden in every block; without splits the rows find no
  // block after the first takes the hidden's whole.
  const int64_t cap = static_cast<int64_t>(750 * kMiB);
  h3::BlockPool pool = dev.pool(cap);
  void* residual = must_alloc(pool, 100 * kMiB);
  dit_block(pool);
  const h3::BlockPoolCounts shaped = pool.take_counts();
  EXPECT_EQ(shaped.cap_frees, 6);  // the first block's rows, to make room for the hidden
  const int allocs = dev.allocs, frees = dev.frees;
  for (int block = 0; block < 50; ++block) dit_block(pool);
  const h3::BlockPoolCounts steady = pool.take_counts();
  EXPECT_EQ(steady.cap_frees, 0);
  EXPECT_EQ(steady.mallocs, 0);
  EXPECT_EQ(dev.allocs, allocs);
  EXPECT_EQ(dev.frees, frees);
  EXPECT_LE(dev.peak, cap);
  pool.free(residual);
  pool.release();
  EXPECT_EQ(dev.bytes, 0);
  EXPECT_EQ(pool.state().segments, 0);
}

TEST(BlockPool, SplitsAndMergesKeepBlocksApartInsideTheirSegments) {
  FakeDevice dev;
  const int64_t cap = static_cast<int64_t>(600 * kMiB);
  h3::BlockPool pool = dev.pool(cap);
  std::mt19937_64 rng(37);
  std::map<uintptr_t, size_t> held;  // address -> asked
  int refused = 0;
  for (int i = 0; i < 20000; ++i) {
    if (!held.empty() && (rng() % 100 < 48 || held.size() > 200)) {
      auto it = held.begin();
      std::advance(it, static_cast<long>(rng() % held.size()));
      pool.free(reinterpret_cast<void*>(it->first));
      held.erase(it);
      continue;
    }
    const int kind = static_cast<int>(rng() % 3);
    const size_t n = kind == 0 ? 1 + rng() % kMiB : kind == 1 ? kMiB + rng() % (9 * kMiB) : rng() % (64 * kMiB) + 1;
    h3::BlockPool::Refusal why = h3::BlockPool::Refusal::none;
    void* p = pool.alloc(n, &why);
    if (p == nullptr) {
      EXPECT_NE(why, h3::BlockPool::Refusal::none);
      EXPECT_NE(why, h3::BlockPool::Refusal::device_full);
      refused += 1;
      continue;
    }
    const auto a = reinterpret_cast<uintptr_t>(p);
    EXPECT_EQ(a % 512, 0u);
    // Inside one segment, and overlapping no live block.
    auto seg = dev.live.upper_bound(a);
    ASSERT_NE(seg, dev.live.begin());
    --seg;
    EXPECT_LE(a + n, seg->first + seg->second);
    auto after = held.lower_bound(a);
    if (after != held.end()) {
      EXPECT_LE(a + n, after->first);
    }
    if (after != held.begin()) {
      auto before = std::prev(after);
      EXPECT_LE(before->first + before->second, a);
    }
    held[a] = n;
    EXPECT_LE(pool.state().reserved, cap);
  }
  int64_t asked = 0;
  for (const auto& [a, n] : held) asked += static_cast<int64_t>(n);
  EXPECT_GE(pool.state().in_use, asked);
  EXPECT_EQ(pool.state().reserved, dev.bytes);
  for (const auto& [a, n] : held) pool.free(reinterpret_cast<void*>(a));
  EXPECT_EQ(pool.state().in_use, 0);
  pool.release();
  EXPECT_EQ(dev.bytes, 0);
  EXPECT_EQ(dev.allocs, dev.frees);
  RecordProperty("refused", refused);
}

TEST(BlockPool, RefusalsNameTheirReason) {
  FakeDevice dev;
  h3::BlockPool pool = dev.pool(static_cast<int64_t>(100 * kMiB));
  h3::BlockPool::Refusal why = h3::BlockPool::Refusal::none;
  EXPECT_EQ(pool.alloc(101 * kMiB, &why), nullptr);
  EXPECT_EQ(why, h3::BlockPool::Refusal::over_cap);
  // Segments of 40, 40 and 20 MiB; 30 MiB of each 40 in use and the 20 held: 80 in use, so 15 more fit the cap's
  // arithmetic, but the 20 free lie in two pieces of 10 and no segment may be added.
  void* a = must_alloc(pool, 40 * kMiB);
  void* b = must_alloc(pool, 40 * kMiB);
  void* x = must_alloc(pool, 20 * kMiB);
  pool.free(a);
  void* c = must_alloc(pool, 30 * kMiB);
  pool.free(b);
  void* d = must_alloc(pool, 30 * kMiB);
  EXPECT_EQ(pool.alloc(15 * kMiB, &why), nullptr);
  EXPECT_EQ(why, h3::BlockPool::Refusal::fragmented);
  EXPECT_EQ(pool.state().largest_free, static_cast<int64_t>(10 * kMiB));
  void* e = must_alloc(pool, 10 * kMiB);  // exactly one of the pieces
  for (void* p : {c, d, x, e}) pool.free(p);
  // The device itself short (another process): the whole free segments go back and the pool asks once more.
  dev.limit = static_cast<int64_t>(90 * kMiB);
  EXPECT_NE(must_alloc(pool, 80 * kMiB), nullptr);
  EXPECT_EQ(pool.state().reserved, static_cast<int64_t>(80 * kMiB));
  dev.limit = 0;
  EXPECT_EQ(pool.alloc(15 * kMiB, &why), nullptr);
  EXPECT_EQ(why, h3::BlockPool::Refusal::device_full);
}

TEST(BlockPool, AtTheCapTheSmallestWholeFreeSegmentThatMakesRoomGoesBack) {
  FakeDevice dev;
  h3::BlockPool pool = dev.pool(static_cast<int64_t>(100 * kMiB));
  void* a = must_alloc(pool, 20 * kMiB);
  void* b = must_alloc(pool, 30 * kMiB);
  void* c = must_alloc(pool, 40 * kMiB);
  pool.free(a), pool.free(b), pool.free(c);  // 90 MiB reserved, all free
  void* d = must_alloc(pool, 45 * kMiB);     // no free block holds it; 90 + 46 > 100: one of 36 MiB or more goes
  const h3::BlockPoolCounts n = pool.counts();
  EXPECT_EQ(n.cap_frees, 1);
  EXPECT_EQ(n.cap_free_bytes, static_cast<int64_t>(40 * kMiB));
  EXPECT_EQ(pool.state().reserved, static_cast<int64_t>(96 * kMiB));
  pool.free(d);
  // Small requests share 2 MiB segments: 64 of 32 KiB take one.
  std::vector<void*> small;
  for (int i = 0; i < 64; ++i) small.push_back(must_alloc(pool, 32 * 1024));
  EXPECT_EQ(pool.state().segments, 4);
  for (void* p : small) pool.free(p);
  EXPECT_EQ(pool.release(), static_cast<int64_t>(98 * kMiB));
}

TEST(BlockPool, ALowerCapGivesBackWhatIsFreeAndBoundsLaterSegments) {
  FakeDevice dev;
  h3::BlockPool pool = dev.pool(static_cast<int64_t>(200 * kMiB));
  void* live = must_alloc(pool, 60 * kMiB);
  void* gone = must_alloc(pool, 100 * kMiB);
  pool.free(gone);
  pool.set_cap(static_cast<int64_t>(100 * kMiB));  // ranks sharing the device: the free 100 MiB segment goes now
  EXPECT_EQ(dev.bytes, static_cast<int64_t>(60 * kMiB));
  h3::BlockPool::Refusal why = h3::BlockPool::Refusal::none;
  EXPECT_EQ(pool.alloc(50 * kMiB, &why), nullptr);
  EXPECT_EQ(why, h3::BlockPool::Refusal::over_cap);
  void* more = must_alloc(pool, 40 * kMiB);
  EXPECT_EQ(pool.release(), 0);  // nothing whole and free: the live blocks' segments stay
  pool.free(live), pool.free(more);
  EXPECT_EQ(pool.release(), static_cast<int64_t>(100 * kMiB));
  EXPECT_EQ(pool.state().reserved, 0);
}

}  // namespace

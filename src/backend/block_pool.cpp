#include "backend/block_pool.h"

#include <algorithm>
#include <iterator>
#include <vector>

#include "core/error.h"

namespace h3 {

namespace {

constexpr size_t kAlign = 512;
constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kSmallSegmentBytes = 2 * kMiB;
constexpr size_t kMidRequestBytes = 10 * kMiB;  // requests up to this share 20 MiB segments
constexpr size_t kMidSegmentBytes = 20 * kMiB;
constexpr size_t kLargeMinSplit = kMiB;  // a large block keeps a rest under this instead of splitting it off

size_t round_up(size_t n, size_t to) {
  return (n + to - 1) / to * to;
}

// The segment a request of `r` (rounded) bytes that no free block holds gets.
size_t segment_bytes_for(size_t r) {
  if (r <= kSmallRequestBytes) return kSmallSegmentBytes;
  if (r <= kMidRequestBytes) return kMidSegmentBytes;
  return round_up(r, 2 * kMiB);
}

}  // namespace

BlockPool::BlockPool(RawAlloc alloc, RawFree free, int64_t cap)
    : alloc_(std::move(alloc)), free_(std::move(free)), cap_(cap) {}

bool BlockPool::segment_free(uintptr_t base) const {
  const Block& b = blocks_.at(base);
  return b.free && b.size == segments_.at(base);
}

void BlockPool::drop_segment(uintptr_t base) {
  const Block& b = blocks_.at(base);
  free_set(b.small).erase({b.size, base});
  blocks_.erase(base);
  reserved_ -= static_cast<int64_t>(segments_.at(base));
  segments_.erase(base);
  free_(reinterpret_cast<void*>(base));
}

// Gives whole free segments back until a new one of `segment_bytes` fits under the cap; false (nothing given back)
// when all of them would not make room.
bool BlockPool::make_room(size_t segment_bytes) {
  const int64_t need = reserved_ + static_cast<int64_t>(segment_bytes) - cap_;
  if (need <= 0) return true;
  std::vector<std::pair<size_t, uintptr_t>> whole;  // (size, base)
  int64_t available = 0;
  for (const auto& [base, size] : segments_)
    if (segment_free(base)) whole.emplace_back(size, base), available += static_cast<int64_t>(size);
  if (available < need) return false;
  std::sort(whole.begin(), whole.end());
  auto one =
      std::find_if(whole.begin(), whole.end(), [&](const auto& s) { return static_cast<int64_t>(s.first) >= need; });
  if (one != whole.end()) whole = {*one};  // the smallest that makes room alone
  int64_t freed = 0;
  for (auto it = whole.rbegin(); it != whole.rend() && freed < need; ++it) {
    counts_.cap_frees += 1, counts_.cap_free_bytes += static_cast<int64_t>(it->first);
    freed += static_cast<int64_t>(it->first);
    drop_segment(it->second);
  }
  return true;
}

int64_t BlockPool::release_locked() {
  int64_t freed = 0;
  for (auto it = segments_.begin(); it != segments_.end();) {
    const uintptr_t base = it->first;
    const size_t size = it->second;
    ++it;
    if (!segment_free(base)) continue;
    freed += static_cast<int64_t>(size);
    drop_segment(base);
  }
  return freed;
}

uintptr_t BlockPool::new_segment(size_t bytes, bool small, Refusal* why) {
  size_t seg = segment_bytes_for(bytes);
  if (!make_room(seg)) {
    // A mid-size request may still fit a segment of its own size.
    seg = round_up(bytes, 2 * kMiB);
    if (small || !make_room(seg)) {
      *why = Refusal::fragmented;
      return 0;
    }
  }
  void* p = alloc_(seg);
  if (p == nullptr) {  // the device itself is short (another process): every whole free segment back, once more
    release_locked();
    p = alloc_(seg);
    if (p == nullptr) {
      *why = Refusal::device_full;
      return 0;
    }
  }
  const auto base = reinterpret_cast<uintptr_t>(p);
  H3_ASSERT(base % 256 == 0, "the device gave a segment at {} (not 256-byte aligned)", p);
  segments_[base] = seg;
  blocks_[base] = Block{seg, base, true, small};
  free_set(small).insert({seg, base});
  reserved_ += static_cast<int64_t>(seg);
  counts_.mallocs += 1, counts_.malloc_bytes += static_cast<int64_t>(seg);
  return base;
}

// Hands out the free block at `addr` for `bytes` (rounded), splitting off the rest.
void* BlockPool::take(uintptr_t addr, size_t bytes) {
  Block& b = blocks_.at(addr);
  free_set(b.small).erase({b.size, addr});
  const size_t rest = b.size - bytes;
  if (rest >= (b.small ? kAlign : kLargeMinSplit)) {
    blocks_[addr + bytes] = Block{rest, b.segment, true, b.small};
    free_set(b.small).insert({rest, addr + bytes});
    b.size = bytes;
    counts_.splits += 1;
  }
  b.free = false;
  in_use_ += static_cast<int64_t>(b.size);
  peak_ = std::max(peak_, in_use_);
  return reinterpret_cast<void*>(addr);
}

void* BlockPool::alloc(size_t bytes, Refusal* why) {
  *why = Refusal::none;
  const size_t r = round_up(std::max<size_t>(bytes, 1), kAlign);
  const bool small = r <= kSmallRequestBytes;
  std::lock_guard lock(mu_);
  if (in_use_ + static_cast<int64_t>(r) > cap_) {
    *why = Refusal::over_cap;
    return nullptr;
  }
  FreeSet& set = free_set(small);
  auto it = set.lower_bound({r, 0});
  uintptr_t addr = it != set.end() ? it->second : new_segment(r, small, why);
  if (addr == 0) return nullptr;
  return take(addr, r);
}

void BlockPool::free(void* p) {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  auto it = blocks_.find(reinterpret_cast<uintptr_t>(p));
  H3_ASSERT(it != blocks_.end() && !it->second.free, "device block {} freed but not handed out by the pool", p);
  Block& b = it->second;
  in_use_ -= static_cast<int64_t>(b.size);
  b.free = true;
  FreeSet& set = free_set(b.small);
  // Merge with the free neighbours of the same segment.
  auto next = std::next(it);
  if (next != blocks_.end() && next->second.segment == b.segment && next->second.free) {
    set.erase({next->second.size, next->first});
    b.size += next->second.size;
    blocks_.erase(next);
  }
  if (it != blocks_.begin()) {
    auto prev = std::prev(it);
    if (prev->second.segment == b.segment && prev->second.free) {
      set.erase({prev->second.size, prev->first});
      prev->second.size += b.size;
      blocks_.erase(it);
      it = prev;
    }
  }
  set.insert({it->second.size, it->first});
}

int64_t BlockPool::release() {
  std::lock_guard lock(mu_);
  return release_locked();
}

void BlockPool::set_cap(int64_t cap) {
  std::lock_guard lock(mu_);
  cap_ = cap;
  if (reserved_ > cap_) release_locked();
}

BlockPoolState BlockPool::state() const {
  std::lock_guard lock(mu_);
  BlockPoolState s{in_use_, reserved_, peak_, static_cast<int64_t>(segments_.size()), 0};
  for (const FreeSet* set : {&free_small_, &free_large_})
    if (!set->empty()) s.largest_free = std::max(s.largest_free, static_cast<int64_t>(set->rbegin()->first));
  return s;
}

void BlockPool::reset_peak() {
  std::lock_guard lock(mu_);
  peak_ = in_use_;
}

BlockPoolCounts BlockPool::counts() const {
  std::lock_guard lock(mu_);
  return counts_;
}

BlockPoolCounts BlockPool::take_counts() {
  std::lock_guard lock(mu_);
  BlockPoolCounts c = counts_;
  counts_ = BlockPoolCounts{};
  return c;
}

}  // namespace h3

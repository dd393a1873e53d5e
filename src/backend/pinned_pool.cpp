#include "backend/pinned_pool.h"

#include <algorithm>
#include <utility>

#include "core/error.h"

namespace h3 {

PinnedPool::PinnedPool(Alloc alloc, Free free) : alloc_(std::move(alloc)), free_(std::move(free)) {}

void* PinnedPool::take(size_t bytes) {
  bytes = std::max<size_t>(bytes, 1);
  std::lock_guard lock(mu_);
  auto it = kept_.lower_bound(bytes);
  if (it != kept_.end() && it->first <= bytes + bytes / 4) {
    const size_t size = it->first;
    void* p = it->second;
    kept_.erase(it);
    in_use_[p] = size;
    stats_.reused += 1, stats_.reused_bytes += static_cast<int64_t>(size);
    stats_.kept_bytes -= static_cast<int64_t>(size), stats_.in_use_bytes += static_cast<int64_t>(size);
    return p;
  }
  if (bytes >= kLargeBlockBytes) free_kept_locked();
  void* p = alloc_(bytes);
  in_use_[p] = bytes;
  stats_.allocated += 1, stats_.allocated_bytes += static_cast<int64_t>(bytes);
  stats_.in_use_bytes += static_cast<int64_t>(bytes);
  return p;
}

void PinnedPool::give(void* p) {
  if (p == nullptr) return;
  std::lock_guard lock(mu_);
  auto it = in_use_.find(p);
  H3_ASSERT(it != in_use_.end(), "page-locked block {} given back but not taken from the pool", p);
  const size_t size = it->second;
  in_use_.erase(it);
  kept_.emplace(size, p);
  stats_.kept_bytes += static_cast<int64_t>(size), stats_.in_use_bytes -= static_cast<int64_t>(size);
}

PinnedPoolStats PinnedPool::trim() {
  std::lock_guard lock(mu_);
  free_kept_locked();
  const PinnedPoolStats since = stats_;
  stats_ = PinnedPoolStats{};
  stats_.in_use_bytes = since.in_use_bytes;
  return since;
}

void PinnedPool::free_kept_locked() {
  for (auto& [size, p] : kept_) {
    free_(p);
    stats_.freed += 1, stats_.freed_bytes += static_cast<int64_t>(size);
  }
  kept_.clear();
  stats_.kept_bytes = 0;
}

PinnedPoolStats PinnedPool::stats() const {
  std::lock_guard lock(mu_);
  return stats_;
}

}  // namespace h3

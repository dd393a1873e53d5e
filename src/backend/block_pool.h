// The GPU's caching allocator as pure bookkeeping over a raw allocate/free pair (cudaMalloc / cudaFree in
// backend/cuda/runtime.cpp), so that its rules are tested without a GPU.
//
// Why: under a budget a phase runs close to the cap. The exact-size cache this replaces kept a freed block for
// requests of its own size only. A DiT block's attention and MLP need tensors of other sizes, so at the cap each
// block gave cached blocks back to make room: 768p bf16 under 24 GiB did 15,874 such cudaFrees in 49 forwards
// (12.2 TiB), each one waiting for the whole device, which kept the weight copies from running ahead of the compute:
// 6.51 s a DiT call against 5.35 s resident (docs/notes.md). Here a freed range serves any size that fits it.
//
// Rules:
//   Segments: memory comes from the device in segments. A small request (<= kSmallRequestBytes) comes from a 2 MiB
//     segment shared with other small ones; one up to 10 MiB from a 20 MiB segment; a larger one from a segment of
//     its own size. Small and large requests never share a segment, so a small long-lived tensor never pins a large
//     free range.
//   Blocks: sizes are rounded up to 512 bytes (so every block is 512-byte aligned). A request takes the smallest free
//     block of its pool that holds it (best fit) and splits off the rest as a free block (unless the rest is under
//     1 MiB in the large pool: then it takes the whole block). A freed block merges with the free blocks beside it in
//     its segment.
//   Cap: the segments together never exceed the cap, so the device's use stays under it by construction. A request
//     that no free block holds gets a new segment; when that would pass the cap, whole free segments are given back
//     first (the smallest one that makes room, else the largest ones first: the fewest frees, each of which waits for
//     the device). A request is refused when in use + asked > cap (over_cap), or when the free bytes under the cap
//     lie in pieces of used segments that cannot hold it (fragmented).
//   Reuse order: the caller's one stream orders all reuse (a block freed after kernels queued on that stream may be
//     handed out at once to work queued after them), as with cudaMalloc'd blocks before.
//   release(): gives every whole free segment back (between a pipeline's phases).
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <utility>

namespace h3 {

inline constexpr size_t kSmallRequestBytes = size_t{1} << 20;

struct BlockPoolCounts {
  // Since the last take_counts: segments allocated, and segments given back to stay under the cap (each waits for
  // the whole device, so a phase that does it every forward loses its copy/compute overlap); blocks split.
  int64_t mallocs = 0, malloc_bytes = 0, cap_frees = 0, cap_free_bytes = 0, splits = 0;
};

struct BlockPoolState {
  int64_t in_use = 0;    // bytes of the blocks handed out (rounded sizes)
  int64_t reserved = 0;  // bytes of the segments (what the device holds for the pool)
  int64_t peak = 0;      // the largest in_use since the last reset_peak
  int64_t segments = 0;
  int64_t largest_free = 0;  // the largest free block in any segment
};

class BlockPool {
 public:
  using RawAlloc = std::function<void*(size_t)>;  // null when the device has no room
  using RawFree = std::function<void(void*)>;
  enum class Refusal { none, over_cap, fragmented, device_full };

  BlockPool(RawAlloc alloc, RawFree free, int64_t cap);
  BlockPool(const BlockPool&) = delete;
  BlockPool& operator=(const BlockPool&) = delete;

  // A block of at least `bytes`, or null with the reason in `why`. device_full: the raw allocation failed even after
  // every whole free segment went back.
  void* alloc(size_t bytes, Refusal* why);
  void free(void* p);
  // Gives every whole free segment back; returns the bytes given back.
  int64_t release();
  // A lower cap (ranks sharing a device): applies to later segments; whole free segments above it go back now.
  void set_cap(int64_t cap);

  BlockPoolState state() const;
  void reset_peak();
  BlockPoolCounts counts() const;
  BlockPoolCounts take_counts();  // and zeroes them

 private:
  struct Block {
    size_t size = 0;
    uintptr_t segment = 0;  // its segment's base
    bool free = false;
    bool small = false;
  };
  using FreeSet = std::set<std::pair<size_t, uintptr_t>>;  // free blocks by (size, address)

  FreeSet& free_set(bool small) { return small ? free_small_ : free_large_; }
  bool segment_free(uintptr_t base) const;
  void drop_segment(uintptr_t base);
  bool make_room(size_t segment_bytes);
  int64_t release_locked();
  uintptr_t new_segment(size_t bytes, bool small, Refusal* why);
  void* take(uintptr_t addr, size_t bytes);

  RawAlloc alloc_;
  RawFree free_;
  int64_t cap_ = 0;
  mutable std::mutex mu_;
  std::map<uintptr_t, Block> blocks_;  // every block of every segment, by address
  std::map<uintptr_t, size_t> segments_;
  FreeSet free_small_, free_large_;
  int64_t in_use_ = 0, reserved_ = 0, peak_ = 0;
  BlockPoolCounts counts_;
};

}  // namespace h3

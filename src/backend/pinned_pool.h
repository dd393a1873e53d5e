// Page-locked host blocks kept for reuse between the models of one request (the GPU backend's pinned_alloc /
// pinned_release hooks go through it), as pure bookkeeping over an allocate/free pair so its rules are tested without
// a GPU.
//
// Why: under a device budget the text tower parks its streamed layers in page-locked memory for the encode phase and
// the DiT parks its streamed blocks right after. Giving 30 GiB back with cudaFreeHost took ~3.5 s (the 24 GiB runs of
// issue 37 on an H200: encode 4.5 s streamed against 0.19 s resident, the tower's release inside it) and pinning the
// DiT's 28 GiB again another ~13 s of load. Kept blocks serve the DiT's records instead (an FP8 block, 0.91 GB, fits
// a text layer's 0.98 GB record).
//
// Rules:
//   take(n):  the smallest kept block of n..n + n/4 bytes (at most a quarter wasted), else a new one. A miss of
//             kLargeBlockBytes or more first frees every kept block: blocks that did not fit a large request belong to
//             another model's size, and keeping them beside the new ones would add their bytes to the host's peak
//             (a bf16 DiT's 1.29 GB blocks after the text tower's 0.98 GB ones). A small miss (staging buffers)
//             frees nothing.
//   give(p):  keeps the block (the caller has waited for every copy that reads or writes it).
//   trim():   frees every kept block (the end of a request: a server's idle time holds no page-locked memory) and
//             returns the counts since the last trim (then zeroed; the byte figures "now" stay).
// Host memory at any time: the blocks in use plus those kept; the kept ones never add to a peak the same requests
// reach without the pool, since a large miss frees them before it allocates.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>

namespace h3 {

inline constexpr size_t kLargeBlockBytes = size_t{256} << 20;

struct PinnedPoolStats {
  int64_t allocated = 0, reused = 0, freed = 0;  // blocks, since the last trim
  int64_t allocated_bytes = 0, reused_bytes = 0, freed_bytes = 0;
  int64_t kept_bytes = 0, in_use_bytes = 0;  // now
};

class PinnedPool {
 public:
  using Alloc = std::function<void*(size_t)>;  // never returns null (throws)
  using Free = std::function<void(void*)>;
  PinnedPool(Alloc alloc, Free free);
  // Frees nothing: the process's end gives page-locked memory back (a static pool outlives the CUDA runtime).
  ~PinnedPool() = default;
  PinnedPool(const PinnedPool&) = delete;
  PinnedPool& operator=(const PinnedPool&) = delete;

  void* take(size_t bytes);
  void give(void* p);
  PinnedPoolStats trim();
  PinnedPoolStats stats() const;

 private:
  void free_kept_locked();

  Alloc alloc_;
  Free free_;
  mutable std::mutex mu_;
  std::multimap<size_t, void*> kept_;  // by size
  std::map<void*, size_t> in_use_;     // the block's real size (it may be larger than asked)
  PinnedPoolStats stats_;
};

}  // namespace h3

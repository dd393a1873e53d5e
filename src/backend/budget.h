// The device-memory budget of a GPU process (--max-device-memory, GpuOptions::max_device_bytes) as pure arithmetic,
// so that the rules are tested without a GPU; backend/cuda/runtime.cpp reads the device and applies them in its
// caching allocator.
//
//   budget = max_device_bytes, or when 0: what is free on the device at start (after this process's CUDA context and
//            stream exist) less kGpuDefaultMarginBytes.
//   cap    = budget - kGpuOutsideAllocatorBytes: what the caching allocator may hold (in use + cached). The CUDA
//            context, the libraries' own allocations (cuBLAS / cuDNN handles and workspaces, lazily loaded kernels,
//            NCCL buffers) take device memory outside the allocator; the allowance stands for them, so that the
//            process's whole device use stays under the budget by construction.
//   An allocation no free block serves first gives whole free segments back until the segments and the new one fit
//   the cap (backend/block_pool.h); when in use + asked > cap it is refused (GPU memory budget exceeded).
#pragma once
#include <cstdint>
#include <string>

namespace h3 {

// Left free on the device when no budget is given: the room other processes' small allocations (a display server,
// nvidia-smi, a profiler) and the driver's own growth need, so that a run taking "everything free" does not starve
// them. On an empty 139.8 GiB H200 the default cap stays ~137.7 GiB, above the largest run's ~100 GB peak.
inline constexpr int64_t kGpuDefaultMarginBytes = int64_t{512} << 20;
// Device memory this process takes outside the caching allocator: the CUDA context (~0.5 GiB on an H200 with lazy
// module loading), the cuBLAS(Lt) and cuDNN handles with the kernels they load on first use, and NCCL's
// communicator buffers on multi-rank runs. To be checked on the device (scripts/device/hold_gpu_memory.py reads the
// device's own figure of this process's use against the allocator's peak).
inline constexpr int64_t kGpuOutsideAllocatorBytes = int64_t{1} << 30;

struct GpuBudget {
  int64_t budget = 0;         // the process's whole device use may reach this
  int64_t cap = 0;            // what the caching allocator may hold
  int64_t start_cap = 0;      // the cap at start: a later cap (set_gpu_budget_bytes) is never above it
  int64_t free_at_start = 0;  // free device memory when the budget was set
  int64_t total = 0;          // the device's memory
  bool explicit_budget = false;
  // Where the start figure comes from: "--max-device-memory 24.00 GiB" or "free at start ... less ...".
  std::string origin;
  std::string lowered;  // why the cap is below the start cap ("" when it is not)
  // The origin with the lowering, for messages.
  std::string describe() const;
};

// The budget for `requested` bytes (0: the default) on a device with `free_at_start` of `total` bytes free. Throws
// h3::Error when an explicit budget is more than the device's total, more than what is free at start (naming what
// other processes and this process's context hold) or too small to leave the allocator anything.
GpuBudget plan_gpu_budget(int64_t requested, int64_t free_at_start, int64_t total);
// The budget with its cap lowered to `cap` (ranks sharing one GPU split it); never above the start cap (larger
// values give the start cap back). Throws on a negative value.
GpuBudget lower_gpu_budget(const GpuBudget& b, int64_t cap, const std::string& why);
// The allocator's refusals (backend/block_pool.h), as h3::Error: in use + asked past the cap, and a request the cap
// would hold but whose room lies in pieces of at most `largest_free` bytes.
[[noreturn]] void fail_over_budget(const GpuBudget& b, int64_t asked, int64_t in_use);
[[noreturn]] void fail_budget_fragmented(const GpuBudget& b, int64_t asked, int64_t in_use, int64_t largest_free);

}  // namespace h3

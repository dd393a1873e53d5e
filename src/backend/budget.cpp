#include "backend/budget.h"

#include <algorithm>

#include "core/byte_size.h"
#include "core/error.h"

namespace h3 {

namespace {

// The least an explicit budget must leave the allocator beyond the allowance: below this no model runs.
constexpr int64_t kMinAllocatorBytes = int64_t{256} << 20;

std::string gib(int64_t bytes) {
  return format_byte_size(bytes);
}

}  // namespace

GpuBudget plan_gpu_budget(int64_t requested, int64_t free_at_start, int64_t total) {
  H3_ASSERT(total > 0 && free_at_start >= 0 && free_at_start <= total, "GPU memory reading: {} free of {}",
            free_at_start, total);
  H3_CHECK(requested >= 0, "--max-device-memory {}: a budget is a size of at least 0 (0 = what is free)", requested);
  GpuBudget b;
  b.free_at_start = free_at_start;
  b.total = total;
  b.explicit_budget = requested > 0;
  if (b.explicit_budget) {
    H3_CHECK(requested <= total,
             "--max-device-memory {} is more than this GPU's {}; ask for at most the {} free on it at start, or leave "
             "the option out (the default is what is free less {})",
             gib(requested), gib(total), gib(free_at_start), gib(kGpuDefaultMarginBytes));
    H3_CHECK(requested <= free_at_start,
             "--max-device-memory {} is more than the {} free on this GPU at start (of {}; the other {} are held by "
             "other processes and this process's CUDA context); ask for at most {}, or free the GPU (nvidia-smi "
             "lists the processes on it)",
             gib(requested), gib(free_at_start), gib(total), gib(total - free_at_start), gib(free_at_start));
    H3_CHECK(requested >= kGpuOutsideAllocatorBytes + kMinAllocatorBytes,
             "--max-device-memory {} leaves h3's tensors nothing: {} of a budget stand for the CUDA context and the "
             "libraries' own memory; ask for at least {}",
             gib(requested), gib(kGpuOutsideAllocatorBytes), gib(kGpuOutsideAllocatorBytes + kMinAllocatorBytes));
    b.budget = requested;
    b.origin = "--max-device-memory " + gib(requested);
  } else {
    b.budget = free_at_start - kGpuDefaultMarginBytes;
    H3_CHECK(b.budget >= kGpuOutsideAllocatorBytes + kMinAllocatorBytes,
             "only {} of this GPU's {} are free at start (other processes hold the rest); free the GPU (nvidia-smi "
             "lists the processes on it) or use another one",
             gib(free_at_start), gib(total));
    b.origin = "free at start " + gib(free_at_start) + " less a margin of " + gib(kGpuDefaultMarginBytes);
  }
  b.cap = b.budget - kGpuOutsideAllocatorBytes;
  b.start_cap = b.cap;
  return b;
}

std::string GpuBudget::describe() const {
  return lowered.empty() ? origin : origin + ", lowered to " + gib(cap) + " (" + lowered + ")";
}

GpuBudget lower_gpu_budget(const GpuBudget& b, int64_t cap, const std::string& why) {
  H3_CHECK(cap >= 0, "set_gpu_budget_bytes({}): a budget is a size of at least 0", cap);
  GpuBudget out = b;
  out.cap = std::min(cap, b.start_cap);
  out.budget = out.cap + kGpuOutsideAllocatorBytes;
  out.lowered = out.cap < b.start_cap ? why : "";
  return out;
}

namespace {
constexpr const char* kNeedLess =
    "give a larger --max-device-memory, or need less: a smaller size, FP8, more layers streamed from host memory, or "
    "more ranks (--ranks N)";
}  // namespace

void fail_over_budget(const GpuBudget& b, int64_t asked, int64_t in_use) {
  fail(
      "GPU memory budget exceeded: asked for {} with {} in use of the {} budget (--max-device-memory; here {}, less "
      "{} for the CUDA context and libraries); {}",
      gib(asked), gib(in_use), gib(b.cap), b.describe(), gib(kGpuOutsideAllocatorBytes), kNeedLess);
}

void fail_budget_fragmented(const GpuBudget& b, int64_t asked, int64_t in_use, int64_t largest_free) {
  fail(
      "GPU memory budget exceeded: asked for {} with {} in use of the {} budget, the rest free only in pieces of at "
      "most {} (--max-device-memory; here {}); {}",
      gib(asked), gib(in_use), gib(b.cap), gib(largest_free), b.describe(), kNeedLess);
}

}  // namespace h3

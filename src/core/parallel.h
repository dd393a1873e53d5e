// A small fixed thread pool for row- and head-parallel loops on the CPU backend.
#pragma once
#include <cstdint>
#include <functional>

namespace h3 {

// Number of worker threads (H3_THREADS, else the hardware concurrency).
int cpu_threads();
// Calls fn(begin, end) on disjoint chunks covering [0, n). Each index is processed by exactly one call, so
// results never depend on the thread count as long as fn's work per index is independent.
void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn, int64_t min_chunk = 1);

}  // namespace h3

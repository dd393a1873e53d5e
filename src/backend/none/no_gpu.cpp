// The GPU entry points of a build without the CUDA toolkit.
#include "backend/backend.h"
#include "core/error.h"

namespace h3 {

void start_gpu_backend(const GpuOptions&) {
  fail(
      "this h3 was built without the CUDA backend (no CUDA toolkit was found at build time); rebuild on a machine "
      "with nvcc, or run with --device cpu");
}
int gpu_count() {
  return 0;
}
bool gpu_backend_started() {
  return false;
}
Numerics gpu_numerics() {
  return {};
}
void set_gpu_numerics(const Numerics&) {
  fail("set_gpu_numerics: this h3 was built without the CUDA backend");
}
std::string gpu_description() {
  return "no GPU backend in this build";
}
std::string gpu_bus_id() {
  return "";
}
void gpu_synchronize() {}
size_t gpu_peak_bytes() {
  return 0;
}
void gpu_reset_peak() {}
size_t gpu_in_use_bytes() {
  return 0;
}
size_t gpu_total_bytes() {
  return 0;
}
int64_t gpu_budget_bytes() {
  return 0;
}
void set_gpu_budget_bytes(int64_t, const std::string&) {}
int64_t gpu_free_at_start_bytes() {
  return 0;
}
void gpu_release_cached() {}
GpuAllocatorCounts gpu_allocator_counts() {
  return {};
}
void gpu_trim_pinned() {}

}  // namespace h3

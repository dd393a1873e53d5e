// Starting the GPU backend: a backend-neutral entry point, implemented by backend/cuda when the CUDA toolkit was
// found at build time and by a stub that explains what is missing otherwise.
#pragma once
#include <cstdint>
#include <string>

#include "core/numerics.h"

namespace h3 {

struct GpuOptions {
  // Which GPU: the launcher's local rank on this host when it gives one (knobs: OMPI_COMM_WORLD_LOCAL_RANK,
  // SLURM_LOCALID), else `rank`, the rank's local rank on its host (distributed/placement.h), modulo the visible GPUs
  // (so several ranks may share one).
  int rank = 0;
  int local_rank = -1;
  Numerics numerics;      // deterministic mode, FP8 attention, FP8 accumulation
  bool gemm_tune = true;  // time cuBLASLt's candidates per GEMM shape (the gemm_tune knob)
  // The device memory this process may take (--max-device-memory; its CUDA context and libraries included):
  // 0 = what is free on the device at start, less a margin. Refused when larger than the device or than what is free.
  int64_t max_device_bytes = 0;
  std::string gemm_algos;  // the gemm_algos knob: a file keeping cuBLASLt's choice per GEMM shape ("" = none)
  // With no file named: the cache folder where one file per GPU model keeps them (the knob's "auto";
  // backend/gemm_algos_file.h), "" = none.
  std::string gemm_algos_dir;
};

// Selects the GPU, creates the stream and library handles and registers the device hooks and ops. Idempotent.
void start_gpu_backend(const GpuOptions& options);
// NVIDIA GPUs this process could use (0 without the CUDA backend, a driver or a visible GPU); starts nothing.
int gpu_count();
bool gpu_backend_started();
// The numerics of the started GPU backend (tests switch FP8 attention modes between runs with the setter).
Numerics gpu_numerics();
void set_gpu_numerics(const Numerics& numerics);
// "NVIDIA H200, 139.8 GiB, sm_90" or why there is no GPU.
std::string gpu_description();
// PCI bus id of this process's GPU ("0000:19:00.0"), empty when the backend is not started.
std::string gpu_bus_id();
// Waits for all queued GPU work (for timing); a no-op without a GPU.
void gpu_synchronize();
// Peak device bytes allocated since the last reset (the caching allocator's high-water mark).
size_t gpu_peak_bytes();
void gpu_reset_peak();
// Device bytes h3 holds allocated now.
size_t gpu_in_use_bytes();
// Total device memory of this process's GPU (0 without one).
size_t gpu_total_bytes();
// The device-memory budget (backend/budget.h): the bytes h3's caching allocator may hold, in use and cached (the
// budget less the allowance for the CUDA context and libraries). An allocation past it throws "GPU memory budget
// exceeded". 0 without a started GPU backend.
int64_t gpu_budget_bytes();
// Lowers that cap (a generator that learns that several ranks share one GPU gives each its part), never above the
// cap at start: a larger value gives the start cap back. `why` is named in budget errors. A no-op without a GPU.
void set_gpu_budget_bytes(int64_t cap, const std::string& why = "ranks share this GPU");
// Free device memory when the backend started (after its context and streams existed); 0 without a GPU.
int64_t gpu_free_at_start_bytes();
// Hands the caching allocator's whole free segments back to the device (between a pipeline's phases, so that the next
// phase's model finds the memory the last one freed); waits for queued work first. A no-op without a GPU.
void gpu_release_cached();
// What the caching allocator (backend/block_pool.h) did since the last gpu_release_cached: segments allocated
// (cudaMalloc), free segments given back to stay under the budget's cap (each such cudaFree waits for the whole
// device, so a forward that does it loses its copy/compute overlap) and blocks split. Zeros without a GPU.
struct GpuAllocatorCounts {
  int64_t mallocs = 0, malloc_bytes = 0, cap_frees = 0, cap_free_bytes = 0, splits = 0;
};
GpuAllocatorCounts gpu_allocator_counts();
// Frees the page-locked host blocks kept for reuse between the models of a request (backend/pinned_pool.h), logging
// what was reused; the end of a request calls it. A no-op without a GPU.
void gpu_trim_pinned();

}  // namespace h3

// Starting the GPU backend: a backend-neutral entry point, implemented by backend/cuda when the CUDA toolkit was
// found at build time and by a stub that explains what is missing otherwise.
#pragma once
#include <string>

namespace h3 {

struct GpuOptions {
  int rank = 0;  // the rank's local rank on its host: picks the GPU (local rank % visible GPUs), so several ranks may
                 // share one; the launcher's own local rank (OMPI_COMM_WORLD_LOCAL_RANK, SLURM_LOCALID) wins
  bool deterministic = false;  // fixed GEMM and attention choices, independent of a rank's row or head count
};

// Selects the GPU, creates the stream and library handles and registers the device hooks and ops. Idempotent.
void start_gpu_backend(const GpuOptions& options);
// NVIDIA GPUs this process could use (0 without the CUDA backend, a driver or a visible GPU); starts nothing.
int gpu_count();
bool gpu_backend_started();
// Whether the started GPU backend runs in deterministic mode (false without one).
bool gpu_deterministic();
// Whether FP8 activations are quantized per row: in deterministic mode, or with H3_FP8_ACTIVATIONS=rows (an
// experiment: per-row scales, the same GEMMs; per tensor otherwise).
bool gpu_fp8_row_activations();
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
// Hands the caching allocator's free blocks back to the device (between a pipeline's phases, so that the next
// phase's model finds the memory the last one freed); waits for queued work first. A no-op without a GPU.
void gpu_release_cached();

// While one is alive, GEMMs issued by this thread on the GPU choose their cuBLASLt algorithm as deterministic mode
// does (one per weight shape, picked at a fixed reference row count, no split-K), so a row's result does not depend
// on how many rows are stacked with it. The video decode stacks several units per GEMM under it and stays bitwise
// equal to decoding the units one at a time (and so to any sharded split). Nests; a no-op without a GPU.
class GpuPinnedGemms {
 public:
  GpuPinnedGemms();
  ~GpuPinnedGemms();
  GpuPinnedGemms(const GpuPinnedGemms&) = delete;
  GpuPinnedGemms& operator=(const GpuPinnedGemms&) = delete;
};

}  // namespace h3

// Starting the GPU backend: a backend-neutral entry point, implemented by backend/cuda when the CUDA toolkit was
// found at build time and by a stub that explains what is missing otherwise.
#pragma once
#include <string>

namespace h3 {

struct GpuOptions {
  int rank = 0;                // MPI rank: picks the GPU (rank % visible GPUs), so several ranks may share one
  bool deterministic = false;  // fixed GEMM and attention choices, independent of a rank's row or head count
};

// Selects the GPU, creates the stream and library handles and registers the device hooks and ops. Idempotent.
void start_gpu_backend(const GpuOptions& options);
bool gpu_backend_started();
// Whether the started GPU backend runs in deterministic mode (false without one).
bool gpu_deterministic();
// "NVIDIA H200, 139.8 GiB, sm_90" or why there is no GPU.
std::string gpu_description();
// PCI bus id of this process's GPU ("0000:19:00.0"), empty when the backend is not started.
std::string gpu_bus_id();
// Waits for all queued GPU work (for timing); a no-op without a GPU.
void gpu_synchronize();
// Peak device bytes allocated since the last reset (the caching allocator's high-water mark).
size_t gpu_peak_bytes();
void gpu_reset_peak();

}  // namespace h3

// Where the GPU backend keeps cuBLASLt's chosen algorithm per GEMM shape (backend/cuda/gemm_algo_cache.h): a run that
// reads the file makes the same choices as the run that wrote it, so the same bits, and skips the tuning (~0.4 s of a
// first 480p forward on an H100).
#pragma once
#include <string>

namespace h3 {

// `file` when one is named; else, with a cache folder `dir` (the gemm_algos knob's "auto"), one file per GPU model
// there, named after it ("gemm-algos-NVIDIA-H200.json": letters and digits kept, anything else a dash), the folder
// made when missing; "" (every run tunes) when neither is given or the folder cannot be made (said once, as a
// warning).
std::string gemm_algos_file(const std::string& file, const std::string& dir, const std::string& device_name);

}  // namespace h3

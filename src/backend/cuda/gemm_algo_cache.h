// cuBLASLt's chosen algorithm per GEMM shape, kept in a file across runs (the gemm_algos knob): a run that reads the
// file takes the same algorithm for every shape as the run that wrote it, so two runs doing the same arithmetic give
// the same bits even where timing picked among near-equal candidates (a streamed or budgeted run against the
// resident one); and tuning is skipped. The file names the GPU and the cuBLASLt version it was made with; a file of
// another GPU or version is ignored with a warning. By default (the gemm_algos knob's "auto") the file is one per GPU
// model in the user's cache folder (backend/gemm_algos_file.h).
#pragma once
#include <cublasLt.h>

#include <map>
#include <optional>
#include <string>

namespace h3::cuda {

class GemmAlgoCache {
 public:
  // `path` empty: no cache. `device` names the GPU ("NVIDIA H200"); reads the file when it exists.
  void open(const std::string& path, const std::string& device);
  bool enabled() const { return !path_.empty(); }
  std::optional<cublasLtMatmulAlgo_t> find(const std::string& key) const;
  // Records the algorithm chosen for `key` and rewrites the file (atomically: a temporary file renamed).
  void remember(const std::string& key, const cublasLtMatmulAlgo_t& algo);

 private:
  std::string path_, header_;
  bool writable_ = true;  // false after a failed write (said once): the choices stay in memory
  std::map<std::string, cublasLtMatmulAlgo_t> algos_;
};

}  // namespace h3::cuda

// Internal to the CUDA backend's attention files: small owners and builders for cuDNN backend-API descriptors
// (tensors, operation graphs, execution plans) for the bf16 fused SDPA (backend/cuda/attention/dispatch.cpp). Only
// compiled with cuDNN (H3_HAVE_CUDNN).
#pragma once
#if H3_HAVE_CUDNN
#include <cudnn.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace h3::cuda::dnn {

// One cuDNN backend descriptor, destroyed with its owner.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t t);
  Desc(const Desc&) = delete;
  Desc& operator=(const Desc&) = delete;
  ~Desc();
};
using DescPtr = std::unique_ptr<Desc>;

// A refused or failed cuDNN call: what was being done, cuDNN's status and its last error text.
struct Failed {
  std::string what;
};
void ok(cudnnStatus_t st, const char* what);
template <typename T>
void set(Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const T* v,
         const char* what) {
  if (!d.d) throw Failed{std::string("create ") + what};
  ok(cudnnBackendSetAttribute(d.d, name, type, count, v), what);
}
// A finalized descriptor of type t after `fill` set its attributes.
DescPtr make(cudnnBackendDescriptorType_t t, const char* what, const std::function<void(Desc&)>& fill);

// The backend's cuDNN handle on its stream; null when libcudnn cannot start.
cudnnHandle_t handle();

// A 4-d tensor: [batch, heads, rows, cols] with explicit element strides.
struct TensorSpec {
  int64_t uid = 0;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  std::array<int64_t, 4> dims{1, 1, 1, 1};
  std::array<int64_t, 4> strides{1, 1, 1, 1};
  bool is_virtual = false;  // an intermediate of the graph, never in memory
  bool by_value = false;    // a host scalar passed in the variant pack
};
DescPtr tensor(const TensorSpec& s);
// [batch, heads, rows, d] over a row-major buffer of `ld` values per row (a group of heads of a wider buffer);
// batch b starts `rows` rows after batch b - 1 (blocks of rows stacked one after another).
DescPtr head_tensor(int64_t uid, int64_t heads, int64_t rows, int64_t d, int64_t ld, cudnnDataType_t type,
                    int64_t batch = 1);
// A [1, 1, 1, 1] f32 scalar: on the device, or by value.
DescPtr scalar(int64_t uid, bool by_value);

// A finalized execution plan with everything it references kept alive.
struct Plan {
  std::vector<DescPtr> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
  std::string engine;  // which heuristic result was taken, for the logs
  // Other finalized configurations of the same graph, to be timed by tune() (the first is `plan` itself); empty
  // when there is nothing to choose or the choice was made.
  struct Candidate {
    cudnnBackendDescriptor_t plan;
    int64_t workspace;
    std::string engine;
  };
  std::vector<Candidate> candidates;
};
// Candidates whose workspace is larger than this are not kept (an unfused engine's S x S scores).
constexpr int64_t kMaxCandidateWorkspace = int64_t{1} << 30;
// Finalizes the operation graph of `ops` (in data-flow order), asks the heuristics (mode A, then the fallback list)
// and returns the first engine configuration that finalizes; throws Failed with cuDNN's reason otherwise. With
// `candidates`, every other configuration of the same list that finalizes is kept for tune(). `keep` (tensors and
// operations) moves into the plan.
std::unique_ptr<Plan> make_plan(std::vector<DescPtr> keep, const std::vector<cudnnBackendDescriptor_t>& ops,
                                bool candidates = false);
// Times each of the plan's candidates once (after a warm-up run) on these pointers and keeps the fastest; the
// outputs are left as the last candidate computed them, so the caller runs the plan once more. Different engines
// may round differently: only where bits across runs and ranks need not match (never in deterministic mode).
// Logs the timings at info level once per plan.
void tune(Plan& p, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, const char* what);
// Only the finalized operation graph of `ops` (no handle, heuristics or plan): cuDNN checks every operation's dims,
// strides and types and the graph's connections, which needs no GPU. Throws Failed with cuDNN's reason.
DescPtr make_graph(const std::vector<cudnnBackendDescriptor_t>& ops, cudnnHandle_t h = nullptr);
// Runs the plan on the backend's stream with device (or by-value host) pointers for the given tensor uids.
void execute(const Plan& p, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs);

// Heads per cuDNN call for a long-sequence attention: the fastest of all heads, even splits (heads/2, /4, /8) and a
// few fixed sizes, each timed once with `run(g)` (false: that grouping is refused). Every head is computed alone,
// so the grouping never changes a value.
int64_t fastest_group(int64_t heads, const std::function<bool(int64_t)>& run, const char* what);
// Whether an attention of nq x nk is long enough for timed choices (head grouping, engine configurations) to pay
// for their one-time cost: nq * nk >= 2^26.
inline bool long_attention(int64_t nq, int64_t nk) {
  return nq * nk >= (int64_t(1) << 26);
}
// The heads per cuDNN call for this shape: all heads for a short attention, else fastest_group's choice.
int64_t choose_group(int64_t heads, int64_t nq, int64_t nk, const std::function<bool(int64_t)>& run, const char* what);

}  // namespace h3::cuda::dnn
#endif

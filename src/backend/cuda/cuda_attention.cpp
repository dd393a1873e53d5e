#include "backend/cuda/cuda_attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "backend/cuda/cuda_common.h"
#include "backend/cuda/cuda_kernels.h"
#include "core/log.h"

#if H3_HAVE_CUDNN
#include <cudnn.h>
#endif

namespace h3::cuda {

ElemType elem_type(DType t);  // cuda_runtime.cpp

#if H3_HAVE_CUDNN
namespace {

// One cuDNN backend descriptor, destroyed with its owner.
struct Desc {
  cudnnBackendDescriptor_t d = nullptr;
  explicit Desc(cudnnBackendDescriptorType_t t) {
    if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) d = nullptr;
  }
  Desc(const Desc&) = delete;
  ~Desc() {
    if (d) cudnnBackendDestroyDescriptor(d);
  }
};

struct Failed {
  std::string what;
};
void ok(cudnnStatus_t st, const char* what) {
  if (st != CUDNN_STATUS_SUCCESS) throw Failed{std::string(what) + ": " + cudnnGetErrorString(st)};
}
template <typename T>
void set(Desc& d, cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, int64_t count, const T* v,
         const char* what) {
  if (!d.d) throw Failed{std::string("create ") + what};
  ok(cudnnBackendSetAttribute(d.d, name, type, count, v), what);
}

cudnnHandle_t handle() {
  static cudnnHandle_t h = [] {
    cudnnHandle_t x = nullptr;
    if (cudnnCreate(&x) != CUDNN_STATUS_SUCCESS) return static_cast<cudnnHandle_t>(nullptr);
    cudnnSetStream(x, stream());
    return x;
  }();
  return h;
}

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kScale = 5 };

std::unique_ptr<Desc> tensor(int64_t uid, int64_t heads, int64_t rows, int64_t d, int64_t ld, cudnnDataType_t type) {
  auto t = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  // [batch 1, heads, rows, d] over a row-major buffer of `ld` values per row (a group of heads of a wider buffer).
  const int64_t dims[4] = {1, heads, rows, d}, strides[4] = {rows * ld, d, ld, 1};
  const int64_t align = 16;
  set(*t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &type, "tensor type");
  set(*t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, "tensor dims");
  set(*t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, strides, "tensor strides");
  set(*t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "tensor uid");
  set(*t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
  ok(cudnnBackendFinalize(t->d), "finalize tensor");
  return t;
}

// A finalized SDPA execution plan for one shape, with everything it references kept alive.
struct Plan {
  std::vector<std::unique_ptr<Desc>> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t workspace = 0;
};

std::unique_ptr<Plan> build(int64_t nq, int64_t nk, int64_t heads, int64_t d, int64_t ld) {
  auto p = std::make_unique<Plan>();
  cudnnHandle_t h = handle();
  if (!h) throw Failed{"cudnnCreate failed (is libcudnn.so.9 on the library path?)"};
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16;
  auto q = tensor(kQ, heads, nq, d, ld, bf), k = tensor(kK, heads, nk, d, ld, bf),
       v = tensor(kV, heads, nk, d, ld, bf), o = tensor(kO, heads, nq, d, ld, bf);
  auto scale = std::make_unique<Desc>(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  {
    const cudnnDataType_t f = CUDNN_DATA_FLOAT;
    const int64_t one[4] = {1, 1, 1, 1}, uid = kScale, align = 16;
    const bool by_value = true;
    set(*scale, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "scale type");
    set(*scale, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one, "scale dims");
    set(*scale, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one, "scale strides");
    set(*scale, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, "scale uid");
    set(*scale, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "scale alignment");
    set(*scale, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value, "scale by value");
    ok(cudnnBackendFinalize(scale->d), "finalize scale");
  }
  auto op = std::make_unique<Desc>(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR);
  set(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q->d, "sdpa q");
  set(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k->d, "sdpa k");
  set(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v->d, "sdpa v");
  set(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o->d, "sdpa o");
  set(*op, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale->d, "sdpa scale");
  ok(cudnnBackendFinalize(op->d), "finalize sdpa op");
  auto graph = std::make_unique<Desc>(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  set(*graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
  set(*graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op->d, "graph ops");
  ok(cudnnBackendFinalize(graph->d), "finalize graph");
  auto heur = std::make_unique<Desc>(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendHeurMode_t mode = CUDNN_HEUR_MODE_A;
  set(*heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph->d, "heur graph");
  set(*heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
  ok(cudnnBackendFinalize(heur->d), "finalize heuristics");
  constexpr int kMaxCfg = 8;
  std::vector<std::unique_ptr<Desc>> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < kMaxCfg; ++i) {
    cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->d);
  }
  int64_t count = 0;
  ok(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, kMaxCfg, &count,
                              raw.data()),
     "heuristic results");
  std::string last = "no engine configuration";
  for (int64_t i = 0; i < count; ++i) {
    auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
    try {
      set(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
      set(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &raw[i], "plan config");
      ok(cudnnBackendFinalize(plan->d), "finalize plan");
      int64_t got = 0;
      ok(cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got,
                                  &p->workspace),
         "plan workspace");
    } catch (const Failed& f) {
      last = f.what;
      continue;
    }
    p->plan = plan->d;
    for (auto* x : {&q, &k, &v, &o, &scale, &op, &graph, &heur, &plan}) p->keep.push_back(std::move(*x));
    for (auto& c : cfgs) p->keep.push_back(std::move(c));
    return p;
  }
  throw Failed{last};
}

std::mutex g_mu;
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> g_plans;  // null: refused
// Heads per cuDNN call, chosen per shape by timing (every head is computed alone, so the grouping never changes a
// value: at long sequences, groups of a few heads run faster than all heads in one call).
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> g_group;

Plan* plan_for(int64_t nq, int64_t nk, int64_t heads, int64_t d, int64_t ld) {
  std::lock_guard lock(g_mu);
  auto key = std::tuple{nq, nk, heads, d, ld};
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second.get();
  std::unique_ptr<Plan> p;
  try {
    p = build(nq, nk, heads, d, ld);
  } catch (const Failed& f) {
    spdlog::warn("cuDNN SDPA unavailable for {} heads x {} x {} (d {}): {}; using the plain attention kernel (slow)",
                 heads, nq, nk, d, f.what);
  }
  return g_plans.emplace(key, std::move(p)).first->second.get();
}


// Runs cuDNN on heads [0, heads) in groups of g; false when cuDNN refuses a group's shape.
bool run_groups(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                int64_t d, int64_t g) {
  const int64_t ld = heads * d;
  for (int64_t h0 = 0; h0 < heads; h0 += g) {
    const int64_t n = std::min(g, heads - h0);
    Plan* p = plan_for(nq, nk, n, d, ld);
    if (!p) return false;
    auto at = [&](const void* base) {  // bf16: 2 bytes a value
      return const_cast<void*>(static_cast<const void*>(static_cast<const std::byte*>(base) + h0 * d * 2));
    };
    float scale = 1.0f / std::sqrt(static_cast<float>(d));
    void* ptrs[5] = {at(q), at(k), at(v), at(o), &scale};
    const int64_t uids[5] = {kQ, kK, kV, kO, kScale};
    void* ws = p->workspace > 0 ? workspace(static_cast<size_t>(p->workspace)) : nullptr;
    Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    try {
      set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 5, uids, "pack uids");
      set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 5, ptrs, "pack pointers");
      set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "pack workspace");
      ok(cudnnBackendFinalize(pack.d), "finalize pack");
      ok(cudnnBackendExecute(handle(), p->plan, pack.d), "execute");
    } catch (const Failed& f) {
      fail("cuDNN SDPA ({} heads x {} x {}): {}", n, nq, nk, f.what);
    }
  }
  return true;
}

// The group size for this shape: the fastest of a few candidates, timed once on the real buffers.
int64_t group_for(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                  int64_t d) {
  if (const char* e = std::getenv("H3_ATTENTION_GROUP")) {  // tests: force a grouping
    const int64_t g = std::atoll(e);
    if (g > 0) return std::min(g, heads);
  }
  const auto key = std::tuple{nq, nk, heads, d};
  {
    std::lock_guard lock(g_mu);
    auto it = g_group.find(key);
    if (it != g_group.end()) return it->second;
  }
  int64_t best = heads;
  if (nq * nk >= (int64_t(1) << 26)) {  // short sequences: one call, not worth timing
    float best_ms = 0;
    cudaEvent_t a, b;
    H3_CUDA(cudaEventCreate(&a));
    H3_CUDA(cudaEventCreate(&b));
    // All heads, even splits of them (56 -> 28, 14, 7: no ragged last call) and a few fixed sizes.
    std::vector<int64_t> sizes{heads};
    for (int64_t g : {(heads + 1) / 2, (heads + 3) / 4, (heads + 7) / 8, int64_t(16), int64_t(8), int64_t(4)})
      if (g >= 1 && g < heads && std::find(sizes.begin(), sizes.end(), g) == sizes.end()) sizes.push_back(g);
    for (int64_t g : sizes) {
      if (!run_groups(q, k, v, o, nq, nk, heads, d, g)) continue;  // warm-up and plan
      H3_CUDA(cudaEventRecord(a, stream()));
      run_groups(q, k, v, o, nq, nk, heads, d, g);
      H3_CUDA(cudaEventRecord(b, stream()));
      H3_CUDA(cudaEventSynchronize(b));
      float ms = 0;
      H3_CUDA(cudaEventElapsedTime(&ms, a, b));
      if (g == heads || ms < best_ms) best = g, best_ms = ms;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    spdlog::debug("attention {} heads x {} x {}: {} heads per cuDNN call ({:.2f} ms)", heads, nq, nk, best, best_ms);
  }
  std::lock_guard lock(g_mu);
  g_group[key] = best;
  return best;
}

}  // namespace
#endif

std::string attention_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d) {
#if H3_HAVE_CUDNN
  if (plan_for(nq, nk, heads, d, heads * d)) return "cudnn-sdpa";
#endif
  return "simple";
}

void attention(const void* q, const void* k, const void* v, void* o, DType t, int64_t nq, int64_t nk, int64_t heads,
               int64_t d) {
  if (nq == 0 || heads == 0) return;
#if H3_HAVE_CUDNN
  if (t == DType::bf16 && !std::getenv("H3_ATTENTION_SIMPLE") && plan_for(nq, nk, heads, d, heads * d)) {
    const int64_t g = group_for(q, k, v, o, nq, nk, heads, d);
    if (run_groups(q, k, v, o, nq, nk, heads, d, g)) return;
  }
#endif
  H3_CUDA(attention_simple(q, k, v, o, elem_type(t), nq, nk, heads, d, stream()));
}

}  // namespace h3::cuda

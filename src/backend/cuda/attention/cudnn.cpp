#include "backend/cuda/attention/cudnn.h"

#if H3_HAVE_CUDNN
#include <algorithm>
#include <cstdlib>
#include <mutex>

#include "backend/cuda/common.h"
#include "core/log.h"

namespace h3::cuda::dnn {

Desc::Desc(cudnnBackendDescriptorType_t t) {
  if (cudnnBackendCreateDescriptor(t, &d) != CUDNN_STATUS_SUCCESS) d = nullptr;
}
Desc::~Desc() {
  if (d) cudnnBackendDestroyDescriptor(d);
}

void ok(cudnnStatus_t st, const char* what) {
  if (st == CUDNN_STATUS_SUCCESS) return;
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string msg = std::string(what) + ": " + cudnnGetErrorString(st);
  if (detail[0]) msg += std::string(" (") + detail + ")";
  throw Failed{msg};
}

DescPtr make(cudnnBackendDescriptorType_t t, const char* what, const std::function<void(Desc&)>& fill) {
  auto d = std::make_unique<Desc>(t);
  if (!d->d) throw Failed{std::string("create ") + what};
  fill(*d);
  ok(cudnnBackendFinalize(d->d), what);
  return d;
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

DescPtr tensor(const TensorSpec& s) {
  return make(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor", [&](Desc& t) {
    const int64_t align = 16;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &s.type, "tensor type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, s.dims.data(), "tensor dims");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, s.strides.data(), "tensor strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &s.uid, "tensor uid");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, "tensor alignment");
    if (s.is_virtual) set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &s.is_virtual, "tensor virtual");
    if (s.by_value) set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &s.by_value, "tensor by value");
  });
}

DescPtr head_tensor(int64_t uid, int64_t heads, int64_t rows, int64_t d, int64_t ld, cudnnDataType_t type,
                    int64_t batch) {
  return tensor({uid, type, {batch, heads, rows, d}, {rows * ld, d, ld, 1}});
}

DescPtr scalar(int64_t uid, bool by_value) {
  TensorSpec s;
  s.uid = uid;
  s.by_value = by_value;
  return tensor(s);
}

namespace {

// Up to `max` engine configurations from the heuristics in `mode` (an empty list when the mode has none).
std::vector<DescPtr> configs(Desc& graph, cudnnBackendHeurMode_t mode, int max) {
  auto heur = make(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "finalize heuristics", [&](Desc& x) {
    set(x, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph.d, "heur graph");
    set(x, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode, "heur mode");
  });
  std::vector<DescPtr> cfgs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (int i = 0; i < max; ++i) {
    cfgs.push_back(std::make_unique<Desc>(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR));
    raw.push_back(cfgs.back()->d);
  }
  int64_t count = 0;
  ok(cudnnBackendGetAttribute(heur->d, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, max, &count,
                              raw.data()),
     "heuristic results");
  cfgs.resize(static_cast<size_t>(std::clamp<int64_t>(count, 0, max)));
  return cfgs;
}

}  // namespace

DescPtr make_graph(const std::vector<cudnnBackendDescriptor_t>& ops, cudnnHandle_t h) {
  return make(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "finalize graph", [&](Desc& g) {
    if (h) set(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "graph handle");
    set(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, static_cast<int64_t>(ops.size()), ops.data(),
        "graph ops");
  });
}

std::unique_ptr<Plan> make_plan(std::vector<DescPtr> keep, const std::vector<cudnnBackendDescriptor_t>& ops,
                                bool candidates) {
  cudnnHandle_t h = handle();
  if (!h) throw Failed{"cudnnCreate failed (is libcudnn.so.9 on the library path?)"};
  auto graph = make_graph(ops, h);
  std::string last = "no engine configuration";
  auto p = std::make_unique<Plan>();
  for (cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    std::vector<DescPtr> cfgs;
    try {
      cfgs = configs(*graph, mode, 8);
    } catch (const Failed& f) {
      last = f.what;
      continue;
    }
    for (size_t i = 0; i < cfgs.size(); ++i) {
      auto plan = std::make_unique<Desc>(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      int64_t ws = 0;
      try {
        set(*plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h, "plan handle");
        set(*plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]->d,
            "plan config");
        ok(cudnnBackendFinalize(plan->d), "finalize plan");
        int64_t got = 0;
        ok(cudnnBackendGetAttribute(plan->d, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &got, &ws),
           "plan workspace");
      } catch (const Failed& f) {
        last = f.what;
        continue;
      }
      const std::string name = fmt::format("heuristics {} #{}", mode == CUDNN_HEUR_MODE_A ? "A" : "fallback", i);
      if (!p->plan) {
        p->plan = plan->d;
        p->workspace = ws;
        p->engine = name;
      } else if (ws <= kMaxCandidateWorkspace) {
        p->candidates.push_back({plan->d, ws, name});
      }
      p->keep.push_back(std::move(plan));
      if (!candidates) break;
    }
    for (auto& c : cfgs) p->keep.push_back(std::move(c));
    if (p->plan) break;  // the fallback list only when mode A gave nothing that finalizes
  }
  if (!p->plan) throw Failed{last};
  if (!p->candidates.empty()) p->candidates.insert(p->candidates.begin(), {p->plan, p->workspace, p->engine});
  for (auto& k : keep) p->keep.push_back(std::move(k));
  p->keep.push_back(std::move(graph));
  return p;
}

void tune(Plan& p, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs, const char* what) {
  static std::mutex mu;
  std::lock_guard lock(mu);
  if (p.candidates.size() < 2) return;
  cudaEvent_t a, b;
  H3_CUDA(cudaEventCreate(&a));
  H3_CUDA(cudaEventCreate(&b));
  size_t best = 0;
  float best_ms = -1;
  std::string line;
  for (size_t i = 0; i < p.candidates.size(); ++i) {
    const Plan::Candidate& c = p.candidates[i];
    p.plan = c.plan;
    p.workspace = c.workspace;
    float ms = -1;
    try {
      execute(p, uids, ptrs);  // warm-up, and does it run at all
      H3_CUDA(cudaEventRecord(a, stream()));
      execute(p, uids, ptrs);
      H3_CUDA(cudaEventRecord(b, stream()));
      H3_CUDA(cudaEventSynchronize(b));
      H3_CUDA(cudaEventElapsedTime(&ms, a, b));
    } catch (const Failed& f) {
      spdlog::debug("{}: {} does not run: {}", what, c.engine, f.what);
    }
    line +=
        fmt::format("{}{} {}", i ? ", " : "", c.engine, ms < 0 ? std::string("fails") : fmt::format("{:.3f} ms", ms));
    if (ms >= 0 && (best_ms < 0 || ms < best_ms)) best = i, best_ms = ms;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  const Plan::Candidate& c = p.candidates[best];
  p.plan = c.plan;
  p.workspace = c.workspace;
  p.engine = c.engine;
  // Said at info level only when the timing overrules the heuristics' first choice.
  spdlog::log(best == 0 ? spdlog::level::debug : spdlog::level::info,
              "{}: {} engine configurations timed ({}); keeping {}", what, p.candidates.size(), line, p.engine);
  p.candidates.clear();
}

void execute(const Plan& p, const std::vector<int64_t>& uids, const std::vector<void*>& ptrs) {
  void* ws = p.workspace > 0 ? workspace(static_cast<size_t>(p.workspace)) : nullptr;
  Desc pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  const auto n = static_cast<int64_t>(uids.size());
  set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uids.data(), "pack uids");
  set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptrs.data(), "pack pointers");
  set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, "pack workspace");
  ok(cudnnBackendFinalize(pack.d), "finalize pack");
  ok(cudnnBackendExecute(handle(), p.plan, pack.d), "execute");
}

int64_t choose_group(int64_t heads, int64_t nq, int64_t nk, const std::function<bool(int64_t)>& run, const char* what) {
  return long_attention(nq, nk) ? fastest_group(heads, run, what) : heads;
}

int64_t fastest_group(int64_t heads, const std::function<bool(int64_t)>& run, const char* what) {
  int64_t best = heads;
  float best_ms = 0;
  cudaEvent_t a, b;
  H3_CUDA(cudaEventCreate(&a));
  H3_CUDA(cudaEventCreate(&b));
  // All heads, even splits of them (56 -> 28, 14, 7: no ragged last call) and a few fixed sizes.
  std::vector<int64_t> sizes{heads};
  for (int64_t g : {(heads + 1) / 2, (heads + 3) / 4, (heads + 7) / 8, int64_t(16), int64_t(8), int64_t(4)})
    if (g >= 1 && g < heads && std::find(sizes.begin(), sizes.end(), g) == sizes.end()) sizes.push_back(g);
  bool any = false;
  for (int64_t g : sizes) {
    if (!run(g)) continue;  // warm-up and plan
    H3_CUDA(cudaEventRecord(a, stream()));
    run(g);
    H3_CUDA(cudaEventRecord(b, stream()));
    H3_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    H3_CUDA(cudaEventElapsedTime(&ms, a, b));
    if (!any || ms < best_ms) best = g, best_ms = ms;
    any = true;
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  spdlog::info("{} over {} heads: {} heads per cuDNN call ({:.2f} ms)", what, heads, best, best_ms);
  return best;
}

}  // namespace h3::cuda::dnn
#endif

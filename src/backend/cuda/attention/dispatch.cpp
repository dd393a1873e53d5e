#include "backend/cuda/attention/attention.h"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/attention/cudnn.h"
#include "backend/cuda/attention/simple.h"
#include "backend/cuda/attention/wgmma.h"
#include "backend/cuda/common.h"
#include "backend/cuda/quantize.h"
#include "backend/cuda/tensors.h"
#include "core/log.h"

namespace h3::cuda {

namespace {

// Our wgmma kernel for one kind of attention, where it runs (faster than cuDNN at the DiT's lengths, in bf16 and FP8:
// docs/notes.md, "2026-12-06 (rooms)").
struct OurKernel {
  const char* what;  // "bf16 attention", "FP8 attention"
  std::string (*unsupported)(const void*, const void*, const void*, const void*, int64_t, int64_t, int64_t, int64_t,
                             int64_t);
  std::once_flag logged;
};
OurKernel g_bf16{"bf16 attention", attention_wgmma_unsupported, {}};
OurKernel g_fp8{"FP8 attention", attention_wgmma_fp8_unsupported, {}};

bool use_ours(OurKernel& kernel, const void* q, const void* k, const void* v, const void* o, int64_t nq, int64_t nk,
              int64_t heads, int64_t d) {
  const std::string why = kernel.unsupported(q, k, v, o, nq, nk, heads, d, heads * d);
  if (why.empty()) return true;
  std::call_once(kernel.logged,
                 [&] { spdlog::debug("{}: our wgmma kernel does not run here ({})", kernel.what, why); });
  return false;
}

// Why our kernel would not take this shape ("" when it would): its pointer checks pass for any 16-byte aligned
// buffer.
std::string why_not_ours(const OurKernel& kernel, int64_t nq, int64_t nk, int64_t heads, int64_t d) {
  const void* aligned = reinterpret_cast<const void*>(uintptr_t{256});
  return kernel.unsupported(aligned, aligned, aligned, aligned, nq, nk, heads, d, heads * d);
}

}  // namespace

#if H3_HAVE_CUDNN
namespace {

using dnn::Desc;
using dnn::Failed;
using dnn::Plan;
using dnn::set;

enum Uid : int64_t { kQ = 1, kK = 2, kV = 3, kO = 4, kScale = 5 };

std::unique_ptr<Plan> build(int64_t nq, int64_t nk, int64_t heads, int64_t d, int64_t ld, int64_t batch) {
  const cudnnDataType_t bf = CUDNN_DATA_BFLOAT16;
  auto q = dnn::head_tensor(kQ, heads, nq, d, ld, bf, batch), k = dnn::head_tensor(kK, heads, nk, d, ld, bf, batch),
       v = dnn::head_tensor(kV, heads, nk, d, ld, bf, batch), o = dnn::head_tensor(kO, heads, nq, d, ld, bf, batch);
  auto scale = dnn::scalar(kScale, true);
  auto op = dnn::make(CUDNN_BACKEND_OPERATION_SDPA_FWD_DESCRIPTOR, "finalize sdpa op", [&](Desc& x) {
    set(x, CUDNN_ATTR_OPERATION_SDPA_FWD_QDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &q->d, "sdpa q");
    set(x, CUDNN_ATTR_OPERATION_SDPA_FWD_KDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &k->d, "sdpa k");
    set(x, CUDNN_ATTR_OPERATION_SDPA_FWD_VDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v->d, "sdpa v");
    set(x, CUDNN_ATTR_OPERATION_SDPA_FWD_ODESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &o->d, "sdpa o");
    set(x, CUDNN_ATTR_OPERATION_SDPA_FWD_SCALEDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &scale->d, "sdpa scale");
  });
  const std::vector<cudnnBackendDescriptor_t> ops{op->d};
  std::vector<dnn::DescPtr> keep;
  for (auto* x : {&q, &k, &v, &o, &scale, &op}) keep.push_back(std::move(*x));
  // Engine configurations are timed for the long single-batch sequences of the DiT (not in deterministic mode,
  // where every rank and run must take the same engine, and not for the VAE's stacked units, whose bits must not
  // depend on the stack).
  const bool candidates = !deterministic() && batch == 1 && dnn::long_attention(nq, nk);
  return dnn::make_plan(std::move(keep), ops, candidates);
}

std::mutex g_mu;
// Keyed by (nq, nk, heads, d, ld, batch); null: cuDNN refused the shape.
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, std::unique_ptr<Plan>> g_plans;
// Heads per cuDNN call, chosen per shape by timing (every head is computed alone, so the grouping never changes a
// value: at long sequences, groups of a few heads run faster than all heads in one call).
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, int64_t> g_group;

Plan* plan_for(int64_t nq, int64_t nk, int64_t heads, int64_t d, int64_t ld, int64_t batch = 1) {
  std::lock_guard lock(g_mu);
  auto key = std::tuple{nq, nk, heads, d, ld, batch};
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second.get();
  std::unique_ptr<Plan> p;
  try {
    p = build(nq, nk, heads, d, ld, batch);
  } catch (const Failed& f) {
    if (batch == 1)
      spdlog::warn("cuDNN SDPA unavailable for {} heads x {} x {} (d {}): {}; using the plain attention kernel (slow)",
                   heads, nq, nk, d, f.what);
    else
      spdlog::warn("cuDNN SDPA refuses a batch of {} ({} heads x {} x {}, d {}): {}; one call per block instead", batch,
                   heads, nq, nk, d, f.what);
  }
  return g_plans.emplace(key, std::move(p)).first->second.get();
}

// Runs cuDNN on heads [0, heads) in groups of g; false when cuDNN refuses a group's shape.
bool run_groups(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads, int64_t d,
                int64_t g) {
  const int64_t ld = heads * d;
  for (int64_t h0 = 0; h0 < heads; h0 += g) {
    const int64_t n = std::min(g, heads - h0);
    Plan* p = plan_for(nq, nk, n, d, ld);
    if (!p) return false;
    auto at = [&](const void* base) {  // bf16: 2 bytes a value
      return const_cast<void*>(static_cast<const void*>(static_cast<const std::byte*>(base) + h0 * d * 2));
    };
    float scale = 1.0f / std::sqrt(static_cast<float>(d));
    try {
      const std::vector<int64_t> uids{kQ, kK, kV, kO, kScale};
      const std::vector<void*> ptrs{at(q), at(k), at(v), at(o), &scale};
      if (!p->candidates.empty())
        dnn::tune(*p, uids, ptrs, fmt::format("bf16 attention, {} heads x {} x {}", n, nq, nk).c_str());
      dnn::execute(*p, uids, ptrs);
    } catch (const Failed& f) {
      fail("cuDNN SDPA ({} heads x {} x {}): {}", n, nq, nk, f.what);
    }
  }
  return true;
}

// The group size for this shape: the fastest of a few candidates, timed once on the real buffers.
int64_t group_for(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                  int64_t d) {
  const auto key = std::tuple{nq, nk, heads, d};
  {
    std::lock_guard lock(g_mu);
    auto it = g_group.find(key);
    if (it != g_group.end()) return it->second;
  }
  const int64_t best = dnn::choose_group(
      heads, nq, nk, [&](int64_t g) { return run_groups(q, k, v, o, nq, nk, heads, d, g); }, "bf16 attention");
  std::lock_guard lock(g_mu);
  g_group[key] = best;
  return best;
}

}  // namespace
#endif

std::string attention_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d) {
  if (why_not_ours(g_bf16, nq, nk, heads, d).empty()) return "h3-wgmma";
#if H3_HAVE_CUDNN
  if (plan_for(nq, nk, heads, d, heads * d)) return "cudnn-sdpa";
#endif
  return "simple";
}

bool attention_cudnn(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                     int64_t d) {
  if (nq == 0 || heads == 0) return true;
#if H3_HAVE_CUDNN
  if (!plan_for(nq, nk, heads, d, heads * d)) return false;
  return run_groups(q, k, v, o, nq, nk, heads, d, group_for(q, k, v, o, nq, nk, heads, d));
#else
  (void)q, (void)k, (void)v, (void)o, (void)nk, (void)d;
  return false;
#endif
}

bool attention_batched(const void* q, const void* k, const void* v, void* o, DType t, int64_t batch, int64_t n,
                       int64_t heads, int64_t d) {
  if (batch <= 0 || n == 0 || heads == 0) return true;
#if H3_HAVE_CUDNN
  if (t != DType::bf16) return false;
  Plan* p = plan_for(n, n, heads, d, heads * d, batch);
  if (!p) return false;
  float scale = 1.0f / std::sqrt(static_cast<float>(d));
  try {
    dnn::execute(*p, {kQ, kK, kV, kO, kScale},
                 {const_cast<void*>(q), const_cast<void*>(k), const_cast<void*>(v), o, &scale});
  } catch (const Failed& f) {
    fail("cuDNN SDPA (batch {} x {} heads x {} x {}): {}", batch, heads, n, n, f.what);
  }
  return true;
#else
  (void)q, (void)k, (void)v, (void)o, (void)t, (void)d;
  return false;
#endif
}

namespace {
// Device scratch for one call, back to the caching allocator (which keeps it for the next block) on every path out.
struct Scratch {
  explicit Scratch(size_t n) : bytes(n), p(device_alloc(n)) {}
  ~Scratch() { device_free(p, bytes); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  size_t bytes;
  void* p;
};
}  // namespace

float fp8_f16_score_bound() {
  return kFp8F16ScoreBound;
}

bool attention_fp8_takes_f16_scores(double score_bound, int64_t nq, int64_t heads) {
  return score_bound > 0 && score_bound <= kFp8F16ScoreBound && attention_wgmma_fp8_f16_pays(nq, heads);
}

bool attention_fp8_ours(const void* q8, const void* k8, const void* v8, const float* dq, const float* dk,
                        const float* dv, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk, int64_t heads,
                        int64_t d, double score_bound) {
  if (nq == 0 || heads == 0) return true;
  if (!use_ours(g_fp8, q8, k8, v8, o, nq, nk, heads, d)) return false;
  Scratch vt(static_cast<size_t>(heads * d * attention_wgmma_fp8_vt_cols(nk)));  // V transposed
  try {
    attention_wgmma_fp8(q8, k8, v8, dq, dk, dv, vt.p, o, o_fp8, o_descale, nq, nk, heads, d, heads * d, stream(),
                        attention_fp8_takes_f16_scores(score_bound, nq, heads));
  } catch (const std::runtime_error& e) {
    fail("FP8 attention ({} heads x {} x {}): {}", heads, nq, nk, e.what());
  }
  return true;
}

bool attention_fp8_ours_bf16_v(const void* q8, const void* k8, const void* v, const float* dq, const float* dk,
                               float* v_scale, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk,
                               int64_t heads, int64_t d, double score_bound) {
  if (nq == 0 || heads == 0) return true;
  if (!use_ours(g_fp8, q8, k8, v, o, nq, nk, heads, d)) return false;
  const int64_t ld = heads * d;
  Scratch vt(static_cast<size_t>(ld * attention_wgmma_fp8_vt_cols(nk)));  // V quantized and transposed
  Scratch amax(sizeof(float));
  float* vmax = static_cast<float*>(amax.p);
  try {
    const cudaError_t e = absmax(v, ElemType::bf16, nk * ld, vmax, stream());
    if (e != cudaSuccess) throw std::runtime_error(std::string("max |v|: ") + cudaGetErrorString(e));
    attention_wgmma_fp8_transpose_quantize_v(v, vmax, v_scale, vt.p, nk, ld, stream());
    attention_wgmma_fp8_on_vt(q8, k8, vt.p, dq, dk, v_scale, o, o_fp8, o_descale, nq, nk, heads, d, ld, stream(),
                              attention_fp8_takes_f16_scores(score_bound, nq, heads));
  } catch (const std::runtime_error& e) {
    fail("FP8 attention ({} heads x {} x {}, v quantized inside): {}", heads, nq, nk, e.what());
  }
  return true;
}

std::string attention_fp8_ours_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d) {
  return why_not_ours(g_fp8, nq, nk, heads, d).empty() ? "h3-wgmma-fp8" : "";
}

std::string attention_fp8_unsupported(int64_t nq, int64_t nk, int64_t heads, int64_t d) {
  return why_not_ours(g_fp8, nq, nk, heads, d);
}

void attention(const void* q, const void* k, const void* v, void* o, DType t, int64_t nq, int64_t nk, int64_t heads,
               int64_t d) {
  if (nq == 0 || heads == 0) return;
  if (t == DType::bf16 && use_ours(g_bf16, q, k, v, o, nq, nk, heads, d)) {
    try {
      attention_wgmma(q, k, v, o, nq, nk, heads, d, heads * d, stream());
    } catch (const std::runtime_error& e) {
      fail("bf16 attention ({} heads x {} x {}): {}", heads, nq, nk, e.what());
    }
    return;
  }
#if H3_HAVE_CUDNN
  if (t == DType::bf16 && plan_for(nq, nk, heads, d, heads * d)) {
    const int64_t g = group_for(q, k, v, o, nq, nk, heads, d);
    if (run_groups(q, k, v, o, nq, nk, heads, d, g)) return;
  }
#endif
  H3_CUDA(attention_simple(q, k, v, o, elem_type(t), nq, nk, heads, d, stream()));
}

}  // namespace h3::cuda

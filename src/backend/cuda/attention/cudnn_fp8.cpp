// FP8 (e4m3) non-causal attention on Hopper through a cuDNN operation graph written with the backend API.
//
// cuDNN's single SDPA operation (used for bf16 in backend/cuda/attention/dispatch.cpp) has no descale inputs, so the
// FP8 forward is spelled out as the graph that cuDNN's fused FP8 flash-attention engine recognises (the pattern
// cudnn-frontend's sdpa_fp8 node lowers to). Per group of n heads, over row-major buffers of ld = heads*d values a row:
//
// clang-format off
//   Q  [1, n, nq, d]  strides [nq*ld, d, ld, 1]   fp8        value = stored * dq   (dq, dk, dv: device f32)
//   Kt [1, n, d, nk]  strides [nk*ld, d, 1, ld]   fp8        K read transposed, no copy
//   V  [1, n, nk, d]  strides [nk*ld, d, ld, 1]   fp8
//   P  = (Q x Kt) * attn_scale * dq * dk           f32 virtual [1, n, nq, nk] (attn_scale = 1/sqrt(d), by value)
//   M  = max_j P,  E = exp(P - M),  Z = sum_j E    softmax as reductions and pointwise ops (cuDNN < 9.21)
//   Stats = M + log Z                              virtual, or written to scratch (variants below)
//   S  = E / Z,    amax_s = max |S|                amax to scratch
//   S8 = fp8(S * scale_s)                          scale_s = 448 (S <= 1): e4m3's full range; H3_ATTENTION_FP8_SCALE_S
//   O' = (S8 x V) * descale_s * dv                 f32 virtual, descale_s = 1/448;  amax_o = max |O'| to scratch
//   O  = O' * scale_o                              bf16 O: scale_o = 1 (by value); fp8 O: scale_o = 0.875/dv on
//                                                  the device (|o| <= max|v| <= 448 dv), then o = fp8 * dv/0.875
// clang-format on
//
// A bf16 O with fp8 inputs is documented only on Blackwell with cuDNN 9.13+ (cudnn-frontend's support checks;
// Transformer Engine enables its bf16-O recipe only on sm100+), and whether the stats must be a real output may
// depend on the version, so the variants are tried in order — bf16 O / virtual stats, bf16 O / stats (both only
// where documented, or when asked for), fp8 O / virtual stats, fp8 O / stats — and every refusal is logged with
// cuDNN's text. H3_ATTENTION_FP8_O=bf16|fp8 restricts the O type (tests, the check program).
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cuda/attention/attention.h"
#include "backend/cuda/attention/cudnn.h"
#include "backend/cuda/common.h"
#include "backend/cuda/kernels.h"
#include "core/log.h"

namespace h3::cuda {

#if H3_HAVE_CUDNN
namespace {

using dnn::Desc;
using dnn::Failed;
using dnn::Plan;
using dnn::set;

enum Uid : int64_t {
  kQ = 1,
  kK,
  kV,
  kO,
  kAttnScale,
  kDescaleQ,
  kDescaleK,
  kDescaleV,
  kDescaleS,
  kScaleS,
  kScaleO,
  kAmaxS,
  kAmaxO,
  kStats,
  kFirstVirtual = 100
};

struct Variant {
  bool o_bf16;
  bool stats_out;
  const char* name;
};
constexpr Variant kVariants[] = {{true, false, "O bf16"},
                                 {true, true, "O bf16, stats written"},
                                 {false, false, "O fp8 + dequantize"},
                                 {false, true, "O fp8 + dequantize, stats written"}};
constexpr int kNumVariants = 4;

using Dims = std::array<int64_t, 4>;
Dims row_major(const Dims& d) {
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

// The operation graph under construction: its tensors and operations, kept alive for the plan.
struct Graph {
  std::vector<dnn::DescPtr> keep;
  std::vector<cudnnBackendDescriptor_t> ops;
  int64_t next_uid = kFirstVirtual;

  Desc* add(dnn::DescPtr d) {
    keep.push_back(std::move(d));
    return keep.back().get();
  }
  Desc* real(int64_t uid, cudnnDataType_t type, const Dims& dims, const Dims& strides) {
    return add(dnn::tensor({uid, type, dims, strides}));
  }
  Desc* virt(const Dims& dims, const Dims& strides, cudnnDataType_t type = CUDNN_DATA_FLOAT) {
    return add(dnn::tensor({next_uid++, type, dims, strides, true, false}));
  }
  Desc* virt(const Dims& dims) { return virt(dims, row_major(dims)); }
  void op(dnn::DescPtr d) { ops.push_back(add(std::move(d))->d); }

  // y = x (mode) b, or y = mode(x) when b is null; f32 arithmetic.
  void pointwise(cudnnPointwiseMode_t mode, Desc* x, Desc* b, Desc* y) {
    Desc* pw = add(dnn::make(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "finalize pointwise", [&](Desc& p) {
      const cudnnDataType_t f = CUDNN_DATA_FLOAT;
      set(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode, "pointwise mode");
      set(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &f, "pointwise precision");
    }));
    op(dnn::make(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "finalize pointwise op", [&](Desc& o) {
      set(o, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw->d, "pw desc");
      set(o, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d, "pw x");
      if (b) set(o, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d, "pw b");
      set(o, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d, "pw y");
    }));
  }
  // y = reduction of x over the axes where y has size 1; f32 accumulation.
  void reduction(cudnnReduceTensorOp_t mode, Desc* x, Desc* y) {
    Desc* r = add(dnn::make(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "finalize reduction", [&](Desc& p) {
      const cudnnDataType_t f = CUDNN_DATA_FLOAT;
      set(p, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode, "reduction mode");
      set(p, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "reduction precision");
    }));
    op(dnn::make(CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "finalize reduction op", [&](Desc& o) {
      set(o, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &r->d, "reduction desc");
      set(o, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d, "reduction x");
      set(o, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d, "reduction y");
    }));
  }
  // c = a x b over the last two axes, batched over the first two; f32 accumulation.
  void matmul(Desc* a, Desc* b, Desc* c) {
    Desc* m = add(dnn::make(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "finalize matmul", [&](Desc& p) {
      const cudnnDataType_t f = CUDNN_DATA_FLOAT;
      set(p, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &f, "matmul precision");
    }));
    op(dnn::make(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "finalize matmul op", [&](Desc& o) {
      set(o, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a->d, "matmul a");
      set(o, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d, "matmul b");
      set(o, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c->d, "matmul c");
      set(o, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &m->d, "matmul desc");
    }));
  }
};

// The operation graph of one variant; with `plan`, its execution plan (needs the GPU), else only the graph
// finalized (returned as a plan without an executable, for the GPU-less check).
std::unique_ptr<Plan> build(int64_t nq, int64_t nk, int64_t n, int64_t d, int64_t ld, const Variant& var,
                            bool plan = true) {
  const cudnnDataType_t f8 = CUDNN_DATA_FP8_E4M3, f32 = CUDNN_DATA_FLOAT;
  Graph g;
  Desc* q = g.real(kQ, f8, {1, n, nq, d}, {nq * ld, d, ld, 1});
  Desc* kt = g.real(kK, f8, {1, n, d, nk}, {nk * ld, d, 1, ld});
  Desc* v = g.real(kV, f8, {1, n, nk, d}, {nk * ld, d, ld, 1});
  Desc* o = g.real(kO, var.o_bf16 ? CUDNN_DATA_BFLOAT16 : f8, {1, n, nq, d}, {nq * ld, d, ld, 1});
  Desc* attn_scale = g.add(dnn::scalar(kAttnScale, true));
  Desc* dq = g.add(dnn::scalar(kDescaleQ, false));
  Desc* dk = g.add(dnn::scalar(kDescaleK, false));
  Desc* dv = g.add(dnn::scalar(kDescaleV, false));
  Desc* ds = g.add(dnn::scalar(kDescaleS, false));
  Desc* ss = g.add(dnn::scalar(kScaleS, false));
  Desc* so = g.add(dnn::scalar(kScaleO, var.o_bf16));
  Desc* amax_s = g.add(dnn::scalar(kAmaxS, false));
  Desc* amax_o = g.add(dnn::scalar(kAmaxO, false));
  const Dims scores{1, n, nq, nk}, row{1, n, nq, 1}, row_strides{n * nq, nq, 1, 1}, out{1, n, nq, d};

  // Scores, scaled and descaled.
  Desc* p0 = g.virt(scores);
  g.matmul(q, kt, p0);
  Desc* p1 = g.virt(scores);
  g.pointwise(CUDNN_POINTWISE_MUL, p0, attn_scale, p1);
  Desc* p2 = g.virt(scores);
  g.pointwise(CUDNN_POINTWISE_MUL, p1, dq, p2);
  Desc* p3 = g.virt(scores);
  g.pointwise(CUDNN_POINTWISE_MUL, p2, dk, p3);
  // Softmax over keys, with its log-sum-exp statistics.
  Desc* mx = g.virt(row, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_MAX, p3, mx);
  Desc* centred = g.virt(scores);
  g.pointwise(CUDNN_POINTWISE_SUB, p3, mx, centred);
  Desc* e = g.virt(scores);
  g.pointwise(CUDNN_POINTWISE_EXP, centred, nullptr, e);
  Desc* z = g.virt(row, row_strides);
  g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, z);
  Desc* log_z = g.virt(row, row_strides);
  g.pointwise(CUDNN_POINTWISE_LOG, z, nullptr, log_z);
  Desc* stats = var.stats_out ? g.real(kStats, f32, row, row_strides) : g.virt(row, row_strides);
  g.pointwise(CUDNN_POINTWISE_ADD, mx, log_z, stats);
  Desc* s = g.virt(scores);
  g.pointwise(CUDNN_POINTWISE_DIV, e, z, s);
  g.reduction(CUDNN_REDUCE_TENSOR_AMAX, s, amax_s);
  Desc* s8 = g.virt(scores, row_major(scores), f8);
  g.pointwise(CUDNN_POINTWISE_MUL, s, ss, s8);
  // Weighted values, descaled, then scaled into O.
  Desc* o0 = g.virt(out);
  g.matmul(s8, v, o0);
  Desc* o1 = g.virt(out);
  g.pointwise(CUDNN_POINTWISE_MUL, o0, ds, o1);
  Desc* o2 = g.virt(out);
  g.pointwise(CUDNN_POINTWISE_MUL, o1, dv, o2);
  g.pointwise(CUDNN_POINTWISE_MUL, o2, so, o);
  g.reduction(CUDNN_REDUCE_TENSOR_AMAX, o2, amax_o);
  // Engine configurations timed on first use for long sequences (FP8 attention never runs in deterministic mode).
  if (plan) return dnn::make_plan(std::move(g.keep), g.ops, !deterministic() && dnn::long_attention(nq, nk));
  auto p = std::make_unique<Plan>();
  p->keep = std::move(g.keep);
  p->keep.push_back(dnn::make_graph(g.ops));
  return p;
}

// Device scalars of the graph, 16 bytes apart (the alignment its tensors declare): scale_s, descale_s, scale_o and
// descale_o (attention_fp8_scales), then the two amax outputs (not read).
enum Slot : int {
  kScaleSSlot = 0,
  kDescaleSSlot = 4,
  kScaleOSlot = 8,
  kDescaleOSlot = 12,
  kAmaxSSlot = 16,
  kAmaxOSlot = 20
};
float* scalars() {
  static float* p = [] {
    auto* d = static_cast<float*>(device_alloc(32 * sizeof(float)));
    std::vector<float> none(32, -1.0f);  // the amax slots read -1 until a call writes them
    H3_CUDA(cudaMemcpy(d, none.data(), none.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
  }();
  return p;
}

// The scale of P into fp8: 448 (P <= 1 fills e4m3's range), or H3_ATTENTION_FP8_SCALE_S — e.g. 448 / amax_s when
// attention_fp8_amax shows that the quantized P stays far below 1 (long rows of small normalized weights would
// otherwise fall into e4m3's subnormals).
float p_scale() {
  static const float s = [] {
    const char* e = std::getenv("H3_ATTENTION_FP8_SCALE_S");
    if (!e || !*e) return 448.0f;
    char* end = nullptr;
    const float v = std::strtof(e, &end);
    if (*end != '\0' || !(v > 0.0f) || !std::isfinite(v))
      fail(
          "H3_ATTENTION_FP8_SCALE_S={}: expected a positive number (the scale of the softmax weights into fp8, "
          "448 by default)",
          e);
    spdlog::info("FP8 attention: softmax weights scaled by {} into fp8 (H3_ATTENTION_FP8_SCALE_S)", v);
    return v;
  }();
  return s;
}

std::mutex g_mu;
using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int>;        // nq, nk, heads, d, ld, variant
std::map<Key, std::unique_ptr<Plan>> g_plans;                                    // null: refused
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int>, int> g_variant;    // -1: every variant refused
std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int>, int64_t> g_group;  // heads per call, per variant

// The plan (null when refused) and, for a first refusal, cuDNN's reason.
Plan* plan_for(int64_t nq, int64_t nk, int64_t heads, int64_t d, int64_t ld, int var, std::string* why = nullptr) {
  std::lock_guard lock(g_mu);
  const Key key{nq, nk, heads, d, ld, var};
  auto it = g_plans.find(key);
  if (it != g_plans.end()) return it->second.get();
  std::unique_ptr<Plan> p;
  try {
    p = build(nq, nk, heads, d, ld, kVariants[var]);
    spdlog::debug("cuDNN FP8 SDPA {} heads x {} x {} (d {}, {}): {}", heads, nq, nk, d, kVariants[var].name, p->engine);
  } catch (const Failed& f) {
    spdlog::info("cuDNN FP8 SDPA refused for {} heads x {} x {} (d {}, {}): {}", heads, nq, nk, d, kVariants[var].name,
                 f.what);
    if (why) *why = f.what;
  }
  return g_plans.emplace(key, std::move(p)).first->second.get();
}

// The output type asked for: `out`, or H3_ATTENTION_FP8_O when `out` is any.
Fp8AttentionOut wanted(Fp8AttentionOut out) {
  if (out != Fp8AttentionOut::any) return out;
  const char* e = std::getenv("H3_ATTENTION_FP8_O");
  const std::string s = e ? e : "";
  if (s.empty()) return Fp8AttentionOut::any;
  if (s == "bf16") return Fp8AttentionOut::bf16;
  if (s == "fp8") return Fp8AttentionOut::fp8;
  fail("H3_ATTENTION_FP8_O={}: expected bf16 or fp8 (the output type of the FP8 attention graph), or unset", s);
}

// The first variant cuDNN accepts for all heads in one call (-1: none) with the wanted output type.
int variant_for(int64_t nq, int64_t nk, int64_t heads, int64_t d, Fp8AttentionOut want) {
  const auto key = std::tuple{nq, nk, heads, d, static_cast<int>(want)};
  {
    std::lock_guard lock(g_mu);
    auto it = g_variant.find(key);
    if (it != g_variant.end()) return it->second;
  }
  int chosen = -1;
  std::string reasons;
  if (d % 8 != 0 || d > 256) {
    reasons = fmt::format("head_dim {} (cuDNN's FP8 SDPA needs a multiple of 8, at most 256)", d);
  } else {
    // cudnn-frontend declares a bf16 O with fp8 inputs unsupported before Blackwell (and cuDNN 9.13): not tried
    // there unless asked for, so that a backend which accepted it anyway could not give unchecked numbers.
    int dev = 0, major = 0;
    H3_CUDA(cudaGetDevice(&dev));
    H3_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    const bool bf16_o_documented = major >= 10 && cudnnGetVersion() >= 91300;
    for (int i = 0; i < kNumVariants && chosen < 0; ++i) {
      if ((want == Fp8AttentionOut::bf16 && !kVariants[i].o_bf16) ||
          (want == Fp8AttentionOut::fp8 && kVariants[i].o_bf16))
        continue;
      if (want == Fp8AttentionOut::any && kVariants[i].o_bf16 && !bf16_o_documented) {
        if (reasons.empty())
          reasons = fmt::format("[O bf16] not tried: needs sm_100+ and cuDNN 9.13+ (sm_{}0, cuDNN {})", major,
                                cudnnGetVersion());
        continue;
      }
      std::string why;
      if (plan_for(nq, nk, heads, d, heads * d, i, &why))
        chosen = i;
      else
        reasons += fmt::format("{}[{}] {}", reasons.empty() ? "" : "; ", kVariants[i].name, why);
    }
  }
  if (chosen < 0)
    spdlog::warn(
        "cuDNN FP8 SDPA unavailable for {} heads x {} x {} (d {}): {}; the caller falls back to bf16 "
        "attention (run with CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr for cuDNN's own log)",
        heads, nq, nk, d, reasons);
  else
    spdlog::info("cuDNN FP8 SDPA for {} heads x {} x {} (d {}): {}", heads, nq, nk, d, kVariants[chosen].name);
  std::lock_guard lock(g_mu);
  g_variant[key] = chosen;
  return chosen;
}

// Runs the graph on heads [0, heads) in groups of g into `o` (bf16 O, or the fp8 scratch of the fp8-O variants);
// false when cuDNN refuses a group's shape. The scalars must already hold this call's scales.
bool run_groups(const void* q, const void* k, const void* v, const float* dq, const float* dk, const float* dv, void* o,
                int64_t nq, int64_t nk, int64_t heads, int64_t d, int64_t g, int var) {
  const int64_t ld = heads * d;
  const size_t o_bytes = kVariants[var].o_bf16 ? 2 : 1;
  float* sc = scalars();
  for (int64_t h0 = 0; h0 < heads; h0 += g) {
    const int64_t n = std::min(g, heads - h0);
    Plan* p = plan_for(nq, nk, n, d, ld, var);
    if (!p) return false;
    auto at = [&](const void* base, size_t bytes) {
      return const_cast<void*>(static_cast<const void*>(static_cast<const std::byte*>(base) + h0 * d * bytes));
    };
    float attn_scale = 1.0f / std::sqrt(static_cast<float>(d)), one = 1.0f;
    std::vector<int64_t> uids{kQ,        kK,        kV,      kO,      kAttnScale, kDescaleQ, kDescaleK,
                              kDescaleV, kDescaleS, kScaleS, kScaleO, kAmaxS,     kAmaxO};
    std::vector<void*> ptrs{at(q, 1),
                            at(k, 1),
                            at(v, 1),
                            at(o, o_bytes),
                            &attn_scale,
                            const_cast<float*>(dq),
                            const_cast<float*>(dk),
                            const_cast<float*>(dv),
                            sc + kDescaleSSlot,
                            sc + kScaleSSlot,
                            kVariants[var].o_bf16 ? static_cast<void*>(&one) : static_cast<void*>(sc + kScaleOSlot),
                            sc + kAmaxSSlot,
                            sc + kAmaxOSlot};
    void* stats = nullptr;
    const size_t stats_bytes = static_cast<size_t>(n * nq) * sizeof(float);
    if (kVariants[var].stats_out) {
      stats = device_alloc(stats_bytes);
      uids.push_back(kStats);
      ptrs.push_back(stats);
    }
    try {
      if (!p->candidates.empty())
        dnn::tune(*p, uids, ptrs, fmt::format("FP8 attention, {} heads x {} x {}", n, nq, nk).c_str());
      dnn::execute(*p, uids, ptrs);
    } catch (const Failed& f) {
      if (stats) device_free(stats, stats_bytes);
      fail("cuDNN FP8 SDPA ({} heads x {} x {}, {}): {}", n, nq, nk, kVariants[var].name, f.what);
    }
    if (stats) device_free(stats, stats_bytes);  // stream-ordered reuse: later work on the stream may take it
  }
  return true;
}

int64_t group_for(const void* q, const void* k, const void* v, const float* dq, const float* dk, const float* dv,
                  void* o, int64_t nq, int64_t nk, int64_t heads, int64_t d, int var) {
  const auto key = std::tuple{nq, nk, heads, d, var};
  {
    std::lock_guard lock(g_mu);
    auto it = g_group.find(key);
    if (it != g_group.end()) return it->second;
  }
  const int64_t best = dnn::choose_group(
      heads, nq, nk, [&](int64_t g) { return run_groups(q, k, v, dq, dk, dv, o, nq, nk, heads, d, g, var); },
      "fp8 attention");
  std::lock_guard lock(g_mu);
  g_group[key] = best;
  return best;
}

}  // namespace
#endif

std::string attention_fp8_graph_check(int64_t nq, int64_t nk, int64_t heads, int64_t d) {
#if H3_HAVE_CUDNN
  std::string errors;
  for (const Variant& var : kVariants) {
    try {
      build(nq, nk, heads, d, heads * d, var, false);
    } catch (const Failed& f) {
      errors += fmt::format("{}[{}] {}", errors.empty() ? "" : "; ", var.name, f.what);
    }
  }
  return errors;
#else
  return "built without cuDNN";
#endif
}

Fp8AttentionAmax attention_fp8_amax() {
  Fp8AttentionAmax a;
#if H3_HAVE_CUDNN
  float* sc = scalars();
  H3_CUDA(cudaStreamSynchronize(stream()));
  H3_CUDA(cudaMemcpy(&a.s, sc + kAmaxSSlot, sizeof(float), cudaMemcpyDeviceToHost));
  H3_CUDA(cudaMemcpy(&a.o, sc + kAmaxOSlot, sizeof(float), cudaMemcpyDeviceToHost));
#endif
  return a;
}

std::string attention_fp8_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d, Fp8AttentionOut out) {
#if H3_HAVE_CUDNN
  const int var = variant_for(nq, nk, heads, d, wanted(out));
  if (var >= 0) return std::string("cudnn-fp8 (") + kVariants[var].name + ")";
  return "refused";
#else
  return "unavailable (built without cuDNN)";
#endif
}

bool attention_fp8_o8(const void* q, const void* k, const void* v, const float* descale_q, const float* descale_k,
                      const float* descale_v, void* o8, float* o8_descale, int64_t nq, int64_t nk, int64_t heads,
                      int64_t d) {
  if (nq == 0 || heads == 0) return false;
#if H3_HAVE_CUDNN
  const Fp8AttentionOut want = wanted(Fp8AttentionOut::any);
  if (want == Fp8AttentionOut::bf16) return false;
  const int var = variant_for(nq, nk, heads, d, want);
  if (var < 0 || kVariants[var].o_bf16) return false;
  float* sc = scalars();
  H3_CUDA(attention_fp8_scales(descale_v, p_scale(), sc + kScaleSSlot, sc + kDescaleSSlot, sc + kScaleOSlot,
                               sc + kDescaleOSlot, stream()));
  const int64_t g = group_for(q, k, v, descale_q, descale_k, descale_v, o8, nq, nk, heads, d, var);
  if (!run_groups(q, k, v, descale_q, descale_k, descale_v, o8, nq, nk, heads, d, g, var)) return false;
  // The shared scalar slot is rewritten by the next call: the output keeps its own copy (stream-ordered).
  H3_CUDA(cudaMemcpyAsync(o8_descale, sc + kDescaleOSlot, sizeof(float), cudaMemcpyDeviceToDevice, stream()));
  return true;
#else
  return false;
#endif
}

bool attention_fp8(const void* q, const void* k, const void* v, const float* descale_q, const float* descale_k,
                   const float* descale_v, void* o, int64_t nq, int64_t nk, int64_t heads, int64_t d,
                   Fp8AttentionOut out) {
  if (nq == 0 || heads == 0) return true;
#if H3_HAVE_CUDNN
  const int var = variant_for(nq, nk, heads, d, wanted(out));
  if (var < 0) return false;
  float* sc = scalars();
  H3_CUDA(attention_fp8_scales(descale_v, p_scale(), sc + kScaleSSlot, sc + kDescaleSSlot, sc + kScaleOSlot,
                               sc + kDescaleOSlot, stream()));
  if (kVariants[var].o_bf16) {
    const int64_t g = group_for(q, k, v, descale_q, descale_k, descale_v, o, nq, nk, heads, d, var);
    return run_groups(q, k, v, descale_q, descale_k, descale_v, o, nq, nk, heads, d, g, var);
  }
  // fp8 O: into a scratch of nq*heads*d bytes, then o = bf16(o8 * dv / 0.875).
  const size_t bytes = static_cast<size_t>(nq * heads * d);
  void* o8 = device_alloc(bytes);
  bool done = false;
  try {
    const int64_t g = group_for(q, k, v, descale_q, descale_k, descale_v, o8, nq, nk, heads, d, var);
    done = run_groups(q, k, v, descale_q, descale_k, descale_v, o8, nq, nk, heads, d, g, var);
    if (done) H3_CUDA(dequantize_fp8(o8, nq * heads * d, sc + kDescaleOSlot, o, stream()));
  } catch (...) {
    device_free(o8, bytes);
    throw;
  }
  device_free(o8, bytes);
  return done;
#else
  return false;
#endif
}

}  // namespace h3::cuda

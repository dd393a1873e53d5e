#include "backend/cuda/gemm.h"

#include <cublasLt.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/common.h"
#include "backend/cuda/gemm_algo_cache.h"
#include "core/log.h"

namespace h3::cuda {

namespace {

constexpr size_t kWorkspace = 64u << 20;
constexpr int64_t kReferenceRows = 16384;  // deterministic mode picks its algorithm at this row count

void check(cublasStatus_t st, const char* what) {
  if (st != CUBLAS_STATUS_SUCCESS)
    fail("cuBLASLt {} failed: {} ({})", what, cublasGetStatusString(st), static_cast<int>(st));
}

cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::bf16:
      return CUDA_R_16BF;
    case DType::f32:
      return CUDA_R_32F;
    case DType::fp8_e4m3:
      return CUDA_R_8F_E4M3;
    default:
      fail("GEMM: no cuBLASLt path for {} (bf16, f32, fp8_e4m3)", dtype_name(t));
  }
}

cublasLtHandle_t handle() {
  static cublasLtHandle_t h = [] {
    cublasLtHandle_t x = nullptr;
    check(cublasLtCreate(&x), "create");
    return x;
  }();
  return h;
}

// Descriptors of one problem, owned.
struct Problem {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  Problem(const GemmArgs& g, int64_t n) {
    check(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
    const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "transa");
    check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "transb");
    if (g.bias) {
      const cublasLtEpilogue_t ep = CUBLASLT_EPILOGUE_BIAS;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_EPILOGUE, &ep, sizeof ep), "epilogue");
      const cudaDataType_t bt = cuda_type(g.out);
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bt, sizeof bt), "bias type");
    }
    if (g.in == DType::fp8_e4m3 && g.row_scales) {
      // In cuBLASLt's column-major view w is A (m rows: one scale per output) and x is B (n columns: one per row).
      const int32_t vec = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &vec, sizeof vec), "w scale mode");
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &vec, sizeof vec), "x scale mode");
    }
    if (g.in == DType::fp8_e4m3) {
      // Hopper's FP8 tensor cores accumulate at full rate only with fast accumulation (no periodic promotion to
      // f32); the FP8 recipe's tolerance (4e-2) leaves room for it. Numerics::fp8_fast_accum off: promote to f32
      // periodically (slower).
      const int8_t fast = numerics().fp8_fast_accum ? 1 : 0;
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast), "fast accum");
    }
    // Column-major view: w is k x m (transposed to m x k), x is k x n, y is m x n.
    check(cublasLtMatrixLayoutCreate(&a, cuda_type(g.in), g.k, g.m, g.k), "layout w");
    check(cublasLtMatrixLayoutCreate(&b, cuda_type(g.in), g.k, n, g.k), "layout x");
    check(cublasLtMatrixLayoutCreate(&c, cuda_type(g.out), g.m, n, g.m), "layout y");
  }
  ~Problem() {
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatmulDescDestroy(op);
  }
  void set_pointers(const GemmArgs& g) {
    if (g.bias)
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof g.bias), "bias");
    if (g.in == DType::fp8_e4m3) {
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &g.w_scale, sizeof g.w_scale),
            "w scale");
      check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &g.x_scale, sizeof g.x_scale),
            "x scale");
    }
  }
};

thread_local int t_pinned = 0;  // ops::PinnedGemms scopes alive on this thread

using Key = std::tuple<int, int, int64_t, int64_t, int64_t, bool, bool, bool>;
std::mutex g_mu;
std::map<Key, cublasLtMatmulAlgo_t> g_algos;  // the algorithm that ran for this shape

// (shape, rows) pairs whose pinned algorithm cublasLtMatmulAlgoCheck accepted: the check is not repeated for
// every call of a layer that runs many times with one row count.
std::set<std::pair<Key, int64_t>> g_checked;
bool checked_before(const Key& key, int64_t n) {
  std::lock_guard lock(g_mu);
  return g_checked.count({key, n}) > 0;
}
void remember_checked(const Key& key, int64_t n) {
  std::lock_guard lock(g_mu);
  g_checked.insert({key, n});
}

// cuBLASLt's candidates for the problem; empty when it has none.
std::vector<cublasLtMatmulAlgo_t> candidates_for(Problem& p, bool row_scales) {
  cublasLtMatmulPreference_t pref = nullptr;
  check(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const size_t ws = kWorkspace;
  check(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws),
        "workspace preference");
  // How many of the heuristic's results to consider (and time, for large GEMMs): 8, or 32 for per-row-scaled FP8,
  // whose fc1 found a faster algorithm among 32 (docs/notes.md, "2026-12-06 (rooms)").
  const int wanted = row_scales ? 32 : 8;
  std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(wanted));
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(handle(), p.op, p.a, p.b, p.c, p.c, pref, wanted, res.data(), &found);
  cublasLtMatmulPreferenceDestroy(pref);
  std::vector<cublasLtMatmulAlgo_t> out;
  if (st != CUBLAS_STATUS_SUCCESS) return out;
  for (int i = 0; i < found; ++i)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) out.push_back(res[i].algo);
  return out;
}

std::vector<cublasLtMatmulAlgo_t> heuristic(const GemmArgs& g, Problem& p) {
  std::vector<cublasLtMatmulAlgo_t> out = candidates_for(p, g.row_scales);
  if (out.empty())
    fail("cuBLASLt has no algorithm for {} GEMM {}x{}x{} (rows x outputs x inputs{})", dtype_name(g.in), g.n, g.m, g.k,
         g.row_scales ? ", per-row FP8 scales" : "");
  return out;
}

bool tuning() {
  return gemm_tune();
}

GemmAlgoCache& algo_cache() {
  static GemmAlgoCache c;
  return c;
}
std::string key_text(const Key& k) {
  const auto [in, out, n, m, k_, bias, det, rows] = k;
  return fmt::format("{}:{}:{}x{}x{}:{}{}{}", in, out, n, m, k_, bias ? "bias" : "nobias", det ? ":det" : "",
                     rows ? ":rows" : "");
}

}  // namespace

bool gemm_supported(const GemmArgs& g) {
  Problem p(g, g.n > 0 ? g.n : kReferenceRows);
  p.set_pointers(g);
  return !candidates_for(p, g.row_scales).empty();
}

namespace {

// The candidates of deterministic mode (and PinnedGemms): the heuristic's for the shape at kReferenceRows rows, split-K
// off, so that every output element is one uninterrupted reduction over k whatever the row count.
std::vector<cublasLtMatmulAlgo_t> pinned_candidates(const GemmArgs& g) {
  GemmArgs ref = g;
  Problem pr(ref, kReferenceRows);
  pr.set_pointers(g);
  std::vector<cublasLtMatmulAlgo_t> candidates = heuristic(g, pr);
  for (auto& a : candidates) {
    // No split-K: every output element is one uninterrupted reduction over k.
    const int32_t one = 1;
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &one, sizeof one);
    const uint32_t none = CUBLASLT_REDUCTION_SCHEME_NONE;
    cublasLtMatmulAlgoConfigSetAttribute(&a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &none, sizeof none);
  }
  return candidates;
}

// Every candidate run once to warm up (and to see that it runs), then timed once; the index of the fastest, or -1
// when none runs. Logged at debug level.
template <typename Run>
int fastest(const std::vector<cublasLtMatmulAlgo_t>& candidates, Run& run, const GemmArgs& g) {
  cudaEvent_t t0, t1;
  H3_CUDA(cudaEventCreate(&t0));
  H3_CUDA(cudaEventCreate(&t1));
  float best_ms = 0;
  int best = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    if (run(candidates[i]) != CUBLAS_STATUS_SUCCESS) continue;  // warm-up, and does it run at all
    H3_CUDA(cudaEventRecord(t0, stream()));
    run(candidates[i]);
    H3_CUDA(cudaEventRecord(t1, stream()));
    H3_CUDA(cudaEventSynchronize(t1));
    float ms = 0;
    H3_CUDA(cudaEventElapsedTime(&ms, t0, t1));
    if (best < 0 || ms < best_ms) best = static_cast<int>(i), best_ms = ms;
  }
  cudaEventDestroy(t0);
  cudaEventDestroy(t1);
  if (best >= 0)
    spdlog::debug("GEMM {} {}x{}x{}{}: candidate {} of {} fastest ({:.3f} ms, {:.0f} TFLOPS)", dtype_name(g.in), g.n,
                  g.m, g.k, g.row_scales ? " (row scales)" : "", best, candidates.size(), best_ms,
                  2.0 * g.n * g.m * g.k / (best_ms * 1e-3) / 1e12);
  return best;
}

}  // namespace

void gemm(const GemmArgs& g) {
  if (g.n == 0 || g.m == 0) return;
  H3_ASSERT(g.k > 0, "gemm with k = 0");
  const bool det = deterministic() || t_pinned > 0;
  Problem p(g, g.n);
  p.set_pointers(g);
  const Key key{
      static_cast<int>(g.in), static_cast<int>(g.out), det ? 0 : g.n, g.m, g.k, g.bias != nullptr, det, g.row_scales};
  const float alpha = 1.0f, beta = 0.0f;
  auto run = [&](const cublasLtMatmulAlgo_t& a) {
    return cublasLtMatmul(handle(), p.op, &alpha, g.w, p.a, g.x, p.b, &beta, g.y, p.c, g.y, p.c, &a,
                          workspace(kWorkspace), kWorkspace, stream());
  };
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard lock(g_mu);
    auto it = g_algos.find(key);
    if (it == g_algos.end() && algo_cache().enabled()) {
      // Another run's choice for this shape (the gemm_algos file): the same algorithm, hence the same bits.
      if (const auto kept = algo_cache().find(key_text(key)); kept && run(*kept) == CUBLAS_STATUS_SUCCESS) {
        g_algos.emplace(key, *kept);
        return;
      }
    }
    if (it == g_algos.end()) {
      std::vector<cublasLtMatmulAlgo_t> candidates = det ? pinned_candidates(g) : heuristic(g, p);
      // Deterministic mode (or H3_GEMM_TUNE=0, or a small GEMM): the first candidate that runs. Otherwise every
      // candidate is timed once after a warm-up run and the fastest is kept; the last run leaves y computed.
      const bool timed = !det && tuning() && 2.0 * g.n * g.m * g.k >= 1e10 && candidates.size() > 1;
      cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
      if (timed) {
        const int best = fastest(candidates, run, g);
        if (best >= 0) {
          g_algos.emplace(key, candidates[best]);
          algo_cache().remember(key_text(key), candidates[best]);
          check(run(candidates[best]), "matmul");
          return;
        }
      }
      for (const auto& a : candidates) {
        last = run(a);
        if (last == CUBLAS_STATUS_SUCCESS) {
          g_algos.emplace(key, a);
          algo_cache().remember(key_text(key), a);
          return;
        }
      }
      check(last, fmt::format("matmul ({} GEMM {}x{}x{}, {} candidate algorithms)", dtype_name(g.in), g.n, g.m, g.k,
                              candidates.size())
                      .c_str());
    }
    algo = it->second;
  }
  if (det && !checked_before(key, g.n)) {
    cublasLtMatmulHeuristicResult_t r{};
    const cublasStatus_t st = cublasLtMatmulAlgoCheck(handle(), p.op, p.a, p.b, p.c, p.c, &algo, &r);
    if (st == CUBLAS_STATUS_SUCCESS) remember_checked(key, g.n);
    if (st != CUBLAS_STATUS_SUCCESS) {
      if (deterministic())
        fail(
            "deterministic mode: the pinned cuBLASLt algorithm for a {}x{} {} GEMM does not run with {} rows ({}); "
            "run without --deterministic",
            g.m, g.k, dtype_name(g.in), g.n, cublasGetStatusString(st));
      // Pinned only for the stacked video decode: this row count cannot use the pinned algorithm, so it takes the
      // heuristic's (its rows may then differ in the last bits from the same rows in another stack; the GPU
      // vae-parity tests would show it). Said once per shape.
      static std::mutex warn_mu;
      static std::map<std::tuple<int64_t, int64_t, int64_t>, bool> warned;
      {
        std::lock_guard lock(warn_mu);
        if (!warned[{g.n, g.m, g.k}]) {
          warned[{g.n, g.m, g.k}] = true;
          spdlog::warn(
              "stacked video decode: the pinned cuBLASLt algorithm for a {}x{} {} GEMM does not run with {} "
              "rows ({}); using the heuristic's for this row count, so these rows may differ in the last "
              "bits from a decode with other stacking",
              g.m, g.k, dtype_name(g.in), g.n, cublasGetStatusString(st));
        }
      }
      const auto candidates = heuristic(g, p);
      cublasStatus_t last = CUBLAS_STATUS_NOT_SUPPORTED;
      for (const auto& a : candidates)
        if ((last = run(a)) == CUBLAS_STATUS_SUCCESS) return;
      check(last, "matmul (heuristic fallback)");
    }
  }
  check(run(algo), "matmul");
}

void open_gemm_algo_cache(const std::string& path, const std::string& device) {
  std::lock_guard lock(g_mu);
  algo_cache().open(path, device);
}

void pin_gemms(int delta) {
  t_pinned += delta;
}

}  // namespace h3::cuda

// GEMM rates at the DiT's shapes on one GPU: bf16, FP8 with per-tensor activation scales and FP8 with per-row
// scales (cuBLASLt outer-vector scaling), the weights per tensor, for the block projections (one of q/k/v, the three
// as one GEMM, out, fc1, fc2) at the 480p and 768p packed lengths. Each GEMM: one warm-up (which also times cuBLASLt's
// candidates and keeps the fastest, unless H3_GEMM_TUNE=0), then the median of --reps runs, TFLOPS = 2 n m k / t. A
// table, then JSON. Inputs are seeded normal values (never zeros).
//
//   gemm_check [--reps N] [--rows 14908,37830]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/knobs.h"
#include "core/tensor.h"
#include "normal_gpu.h"
#include "ops/ops.h"

namespace {

using namespace h3;

double median_seconds(int reps, const auto& f) {
  f();
  gpu_synchronize();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    const auto a = std::chrono::steady_clock::now();
    f();
    gpu_synchronize();
    t.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count());
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

using bench::normal_gpu;

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<int64_t> rows{14908, 37830};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc)
      reps = std::atoi(argv[++i]);
    else if (a == "--rows" && i + 1 < argc) {
      rows.clear();
      for (char* p = std::strtok(argv[++i], ","); p; p = std::strtok(nullptr, ",")) rows.push_back(std::atoll(p));
    } else {
      std::fprintf(stderr, "usage: gemm_check [--reps N] [--rows 14908,37830]\n");
      return 2;
    }
  }
  try {
    bench::start_gpu_from_knobs();
    std::printf("gemm_check: %s, median of %d\n", gpu_description().c_str(), reps);
    struct W {
      const char* name;
      int64_t m, k;
    };
    const W ws[] = {{"qkv (one of 3)", 7168, 5376},
                    {"qkv (as one)", 21504, 5376},
                    {"out", 5376, 7168},
                    {"fc1", 28672, 5376},
                    {"fc2", 5376, 14336}};
    std::printf("%-15s %6s %6s %6s | %9s %9s %9s  (TFLOPS)\n", "gemm", "n", "m", "k", "bf16", "fp8 tens", "fp8 rows");
    std::string json = "[";
    for (int64_t n : rows)
      for (const W& w : ws) {
        Tensor x = normal_gpu(n, w.k, 1, 1.0f), wt = normal_gpu(w.m, w.k, 2, 0.02f);
        Tensor w8 = ops::quantize_fp8(wt);
        Tensor xt = ops::quantize_fp8(x), xr = ops::quantize_fp8_rows(x);
        const double flop = 2.0 * n * w.m * w.k;
        const double tb = median_seconds(reps, [&] { ops::linear(x, wt); });
        const double tt = median_seconds(reps, [&] { ops::linear(xt, w8); });
        const double tr = median_seconds(reps, [&] { ops::linear(xr, w8); });
        std::printf("%-15s %6lld %6lld %6lld | %9.0f %9.0f %9.0f\n", w.name, static_cast<long long>(n),
                    static_cast<long long>(w.m), static_cast<long long>(w.k), flop / tb / 1e12, flop / tt / 1e12,
                    flop / tr / 1e12);
        char buf[256];
        std::snprintf(buf, sizeof buf,
                      "%s{\"gemm\": \"%s\", \"n\": %lld, \"m\": %lld, \"k\": %lld, \"bf16_tflops\": %.1f, "
                      "\"fp8_tensor_tflops\": %.1f, \"fp8_rows_tflops\": %.1f}",
                      json.size() > 1 ? ",\n " : "", w.name, static_cast<long long>(n), static_cast<long long>(w.m),
                      static_cast<long long>(w.k), flop / tb / 1e12, flop / tt / 1e12, flop / tr / 1e12);
        json += buf;
      }
    std::printf("%s]\n", json.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gemm_check: %s\n", e.what());
    return 1;
  }
  return 0;
}

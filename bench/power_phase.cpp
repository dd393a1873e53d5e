// How one block's kernels behave under the board's power cap: each op's time and the SM clock just before and just
// after it, for the ops run alone back to back (each at its own sustained clock) and interleaved as in a forward
// (three q/k/v projections, attention, the out projection, fc1, fc2). The clock comes from a probe kernel run
// between the ops (one thread counting SM cycles against the global timer for ~20 us), so no device setting is
// touched. Answers: does an op run slower in the forward than alone because of the clock it inherits?
//
//   power_phase [--rows 14908] [--precision fp8|bf16] [--iters 30]
//
// A table per phase (median over the iterations after the first five: ms, MHz before, MHz after), then JSON.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/common.h"
#include "clock_probe.h"
#include "core/knobs.h"
#include "core/tensor.h"
#include "normal_gpu.h"
#include "ops/ops.h"

namespace {

using namespace h3;
using namespace h3::cuda;

using bench::normal_gpu;

struct Op {
  std::string name;
  std::function<void()> run;
};

struct Sample {
  float ms, mhz_before, mhz_after;
};

// Runs `iters` rounds of `ops` in order, no host sync inside a round: probe, op, probe, ... Returns per op name its
// samples over the rounds after the first five.
std::map<std::string, std::vector<Sample>> run_phase(const std::vector<Op>& ops, int iters, float* probes) {
  const int per_round = static_cast<int>(ops.size());
  std::vector<cudaEvent_t> ev(2 * per_round);
  for (auto& e : ev) H3_CUDA(cudaEventCreate(&e));
  std::map<std::string, std::vector<Sample>> out;
  std::vector<float> host(2 * per_round);
  for (int it = 0; it < iters; ++it) {
    for (int i = 0; i < per_round; ++i) {
      launch_clock_probe(probes, 2 * i, stream());
      H3_CUDA(cudaEventRecord(ev[2 * i], stream()));
      ops[i].run();
      H3_CUDA(cudaEventRecord(ev[2 * i + 1], stream()));
      launch_clock_probe(probes, 2 * i + 1, stream());
    }
    H3_CUDA(cudaStreamSynchronize(stream()));
    H3_CUDA(cudaMemcpy(host.data(), probes, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
    if (it < 5) continue;
    for (int i = 0; i < per_round; ++i) {
      float ms = 0;
      H3_CUDA(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]));
      out[ops[i].name].push_back({ms, host[2 * i], host[2 * i + 1]});
    }
  }
  for (auto& e : ev) cudaEventDestroy(e);
  return out;
}

float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  int64_t S = 14908;
  int iters = 30;
  std::string precision = "fp8";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rows" && i + 1 < argc)
      S = std::atoll(argv[++i]);
    else if (a == "--iters" && i + 1 < argc)
      iters = std::max(6, std::atoi(argv[++i]));
    else if (a == "--precision" && i + 1 < argc)
      precision = argv[++i];
    else {
      std::fprintf(stderr, "usage: power_phase [--rows 14908] [--precision fp8|bf16] [--iters 30]\n");
      return 2;
    }
  }
  if (precision != "fp8" && precision != "bf16") {
    std::fprintf(stderr, "power_phase: --precision %s: expected fp8 or bf16\n", precision.c_str());
    return 2;
  }
  try {
    bench::start_gpu_from_knobs();
    const bool f8 = precision == "fp8";
    const int64_t H = 5376, I = 7168, F = 14336, D = 128;
    auto act = [&](int64_t cols, uint64_t seed) {
      Tensor t = normal_gpu(S, cols, seed, 1.0f);
      return f8 ? ops::quantize_fp8_rows(t) : t;
    };
    auto weight = [&](int64_t out, int64_t in, uint64_t seed) {
      Tensor t = normal_gpu(out, in, seed, 0.02f);
      return f8 ? ops::quantize_fp8(t) : t;
    };
    Tensor x = act(H, 1), o = act(I, 2), g = act(F, 3);
    Tensor wq = weight(I, H, 4), wo = weight(H, I, 5), w1 = weight(2 * F, H, 6), w2 = weight(H, F, 7);
    Tensor qb = normal_gpu(S, I, 8, 1.0f), kb = normal_gpu(S, I, 9, 1.0f), vb = normal_gpu(S, I, 10, 1.0f);
    Tensor q8 = f8 ? ops::quantize_fp8(qb) : qb, k8 = f8 ? ops::quantize_fp8(kb) : kb;
    float* probes = nullptr;
    H3_CUDA(cudaMalloc(&probes, 64 * sizeof(float)));

    const Op qkv{"qkv (x3)", [&] { ops::linear(x, wq), ops::linear(x, wq), ops::linear(x, wq); }};
    const Op att{"attention", [&] {
                   if (f8)
                     ops::attention_fp8_out(q8, k8, vb, D);
                   else
                     ops::attention(q8, k8, vb, D);
                 }};
    const Op out{"out", [&] { ops::linear(o, wo); }};
    const Op fc1{"fc1", [&] { ops::linear(x, w1); }};
    const Op fc2{"fc2", [&] { ops::linear(g, w2); }};
    const Op gemms{"gemms (qkv x3, out, fc1, fc2)", [&] { qkv.run(), out.run(), fc1.run(), fc2.run(); }};
    for (const Op* op : {&qkv, &att, &out, &fc1, &fc2}) op->run();  // plans and GEMM tuning outside the phases
    H3_CUDA(cudaStreamSynchronize(stream()));

    std::printf("power_phase: %s, %s, S = %lld, %d rounds a phase (the first 5 not counted)\n",
                gpu_description().c_str(), precision.c_str(), static_cast<long long>(S), iters);
    struct Phase {
      std::string name;
      std::vector<Op> ops;
    };
    const std::vector<Phase> phases = {
        {"attention alone", {att}},
        {"gemms alone", {gemms}},
        {"block order", {qkv, att, out, fc1, fc2}},
        {"attention alone again", {att}},
    };
    std::string json = "[";
    std::printf("%-24s %-32s %9s %11s %11s\n", "phase", "op", "ms", "MHz before", "MHz after");
    for (const Phase& ph : phases) {
      auto res = run_phase(ph.ops, iters, probes);
      for (const Op& op : ph.ops) {
        const auto& s = res[op.name];
        std::vector<float> ms, b, a;
        for (const Sample& e : s) ms.push_back(e.ms), b.push_back(e.mhz_before), a.push_back(e.mhz_after);
        std::printf("%-24s %-32s %9.3f %11.0f %11.0f\n", ph.name.c_str(), op.name.c_str(), median(ms), median(b),
                    median(a));
        char buf[320];
        std::snprintf(buf, sizeof buf,
                      "%s{\"phase\": \"%s\", \"op\": \"%s\", \"precision\": \"%s\", \"S\": %lld, \"ms\": %.4f, "
                      "\"mhz_before\": %.0f, \"mhz_after\": %.0f}",
                      json.size() > 1 ? ",\n " : "", ph.name.c_str(), op.name.c_str(), precision.c_str(),
                      static_cast<long long>(S), median(ms), median(b), median(a));
        json += buf;
      }
    }
    std::printf("%s]\n", json.c_str());
    cudaFree(probes);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "power_phase: %s\n", e.what());
    return 1;
  }
  return 0;
}

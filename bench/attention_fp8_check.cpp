// FP8 attention check and benchmark on one GPU: cuDNN's FP8 SDPA graph (backend/cuda/attention/cudnn_fp8.cpp) against
// the bf16 fused SDPA at the DiT's packed lengths (480p S = 14,908, 768p S = 37,830) with all 56 heads and with 7 (one
// rank of 8 under ulysses), head_dim 128.
//
// For each shape: random q/k/v (uniform, not zeros) in bf16, quantized per tensor to fp8 e4m3 (scale = amax/448);
// the bf16 attention of the bf16 values and the FP8 attention of the fp8 ones, into an output first poisoned with
// NaN bytes so that every element must have been written; rel-L2 of FP8 against the bf16 attention of the same
// dequantized values (the kernel's own error: the softmax weights, and O where cuDNN gives no bf16 O, pass through
// e4m3; expected 1e-2 .. 4e-2) and end to end against bf16 of the unquantized values (q, k, v in e4m3 too: more on
// this uniform data, whose outputs are small averages of many random values); cuDNN's amax of the softmax weights
// (before their scale into fp8) and of O; median times of --reps runs and TFLOPS as 4 * S * S * heads * 128 / t.
// Prints a table, then the same rows as JSON. Exits 1 when a check fails (FP8 refused, an element not written,
// rel-L2 above 5e-2, end to end above 0.15), 2 on a usage error.
//
//   attention_fp8_check [--reps N] [--fp8-o any|bf16|fp8] [--shapes S:H,S:H,...]
//
// Run with CUDNN_LOGERR_DBG=1 CUDNN_LOGDEST_DBG=stderr to see cuDNN's own reasons when it refuses a graph.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/attention/attention.h"
#include "backend/cuda/common.h"
#include "backend/cuda/kernels.h"

namespace {

using namespace h3;
using namespace h3::cuda;

struct Shape {
  int64_t s, heads;
};

struct Row {
  Shape shape;
  double bf16_ms = 0, fp8_ms = 0, quant_ms = 0;
  double rel_l2 = -1;      // FP8 vs bf16 attention of the same (dequantized) values: the FP8 kernel's own error
  double rel_l2_e2e = -1;  // FP8 vs bf16 attention of the unquantized values: with the q/k/v quantization
  Fp8AttentionAmax amax;
  int64_t unwritten = -1;
  std::string bf16_impl, fp8_impl;
  bool fp8_ran = false;
};

// A device buffer from the backend's allocator, returned on scope exit.
struct Buf {
  void* p = nullptr;
  size_t bytes = 0;
  explicit Buf(size_t n) : p(device_alloc(n)), bytes(n) {}
  Buf(const Buf&) = delete;
  ~Buf() { device_free(p, bytes); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

// Median wall time of `reps` runs of f on the stream, in ms (one untimed run first: plans, head-group choice).
template <typename F>
double time_ms(int reps, F&& f) {
  f();
  cudaEvent_t a, b;
  H3_CUDA(cudaEventCreate(&a));
  H3_CUDA(cudaEventCreate(&b));
  std::vector<double> ms;
  for (int i = 0; i < reps; ++i) {
    H3_CUDA(cudaEventRecord(a, stream()));
    f();
    H3_CUDA(cudaEventRecord(b, stream()));
    H3_CUDA(cudaEventSynchronize(b));
    float t = 0;
    H3_CUDA(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

std::vector<uint16_t> to_host(const void* p, int64_t n) {
  std::vector<uint16_t> h(static_cast<size_t>(n));
  H3_CUDA(cudaStreamSynchronize(stream()));
  H3_CUDA(cudaMemcpy(h.data(), p, h.size() * 2, cudaMemcpyDeviceToHost));
  return h;
}
double bf16_value(uint16_t b) {
  uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

Row run(const Shape& sh, int reps, Fp8AttentionOut out) {
  const int64_t d = 128, n = sh.s * sh.heads * d;
  Row r;
  r.shape = sh;
  Buf f32(static_cast<size_t>(n) * 4), amax(4);
  Buf qb(n * 2), kb(n * 2), vb(n * 2), q8(n), k8(n), v8(n), scales(12 * 4), o_ref(n * 2), o(n * 2);
  float* sc = scales.as<float>();  // descales of q, k, v, 16 bytes apart (the alignment cuDNN is told)
  // Uniform values: q, k in [-2, 2] (scores of std ~1.3 after the 1/sqrt(d) scale: a softmax neither flat nor
  // one-hot), v in [-1, 1]; a different stream of numbers for each.
  void* bf[3] = {qb.p, kb.p, vb.p};
  for (int i = 0; i < 3; ++i) {
    H3_CUDA(procedural(0x5eed0000ull + static_cast<uint64_t>(i) * 0x1000000000ull, i < 2 ? 2.0 : 1.0, 0.0,
                       f32.as<float>(), n, stream()));
    H3_CUDA(convert(f32.p, ElemType::f32, bf[i], ElemType::bf16, n, stream()));
  }
  void* f8[3] = {q8.p, k8.p, v8.p};
  auto quantize = [&] {
    for (int i = 0; i < 3; ++i) {
      H3_CUDA(absmax(bf[i], ElemType::bf16, n, amax.as<float>(), stream()));
      H3_CUDA(quantize_fp8(bf[i], ElemType::bf16, n, amax.as<float>(), f8[i], sc + 4 * i, stream()));
    }
  };
  r.quant_ms = time_ms(reps, quantize);

  r.bf16_impl = attention_impl(sh.s, sh.s, sh.heads, d);
  r.bf16_ms = time_ms(reps, [&] { attention(qb.p, kb.p, vb.p, o_ref.p, DType::bf16, sh.s, sh.s, sh.heads, d); });

  r.fp8_impl = attention_fp8_impl(sh.s, sh.s, sh.heads, d, out);
  auto fp8 = [&] { return attention_fp8(q8.p, k8.p, v8.p, sc, sc + 4, sc + 8, o.p, sh.s, sh.s, sh.heads, d, out); };
  H3_CUDA(cudaMemsetAsync(o.p, 0xff, static_cast<size_t>(n) * 2, stream()));  // bf16 0xffff: NaN
  r.fp8_ran = fp8();
  if (!r.fp8_ran) return r;
  r.amax = attention_fp8_amax();
  // Every element written by that first run (a NaN left from the poison, or produced, counts as unwritten).
  std::vector<uint16_t> got = to_host(o.p, n);
  auto rel_l2 = [&](const std::vector<uint16_t>& want, bool count) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double g = bf16_value(got[i]), w = bf16_value(want[i]);
      if (!std::isfinite(g)) {
        if (count) ++r.unwritten;
        continue;
      }
      num += (g - w) * (g - w);
      den += w * w;
    }
    return den > 0 ? std::sqrt(num / den) : -1.0;
  };
  r.unwritten = 0;
  r.rel_l2_e2e = rel_l2(to_host(o_ref.p, n), true);
  // The reference on the values the FP8 kernel saw: bf16 attention of the dequantized q, k, v.
  for (int i = 0; i < 3; ++i) H3_CUDA(dequantize_fp8(f8[i], n, sc + 4 * i, bf[i], stream()));
  attention(qb.p, kb.p, vb.p, o_ref.p, DType::bf16, sh.s, sh.s, sh.heads, d);
  r.rel_l2 = rel_l2(to_host(o_ref.p, n), false);
  r.fp8_ms = time_ms(reps, fp8);
  return r;
}

double tflops(const Shape& s, double ms) {
  return ms > 0 ? 4.0 * double(s.s) * double(s.s) * double(s.heads) * 128.0 / (ms * 1e-3) / 1e12 : 0;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "attention_fp8_check: %s\nusage: attention_fp8_check [--reps N] [--fp8-o any|bf16|fp8] "
               "[--shapes S:H,S:H,...]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  Fp8AttentionOut out = Fp8AttentionOut::any;
  std::vector<Shape> shapes{{14908, 56}, {14908, 7}, {37830, 56}, {37830, 7}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a != "--reps" && a != "--fp8-o" && a != "--shapes") return usage(("unknown option " + a).c_str());
    if (i + 1 >= argc) return usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--reps") {
      reps = std::atoi(v.c_str());
      if (reps < 1) return usage("--reps needs a positive count");
    } else if (a == "--fp8-o") {
      if (v == "any")
        out = Fp8AttentionOut::any;
      else if (v == "bf16")
        out = Fp8AttentionOut::bf16;
      else if (v == "fp8")
        out = Fp8AttentionOut::fp8;
      else
        return usage("--fp8-o takes any, bf16 or fp8");
    } else if (a == "--shapes") {
      shapes.clear();
      size_t p = 0;
      while (p < v.size()) {
        const size_t e = std::min(v.find(',', p), v.size());
        const std::string item = v.substr(p, e - p);
        const size_t c = item.find(':');
        if (c == std::string::npos) return usage(("--shapes item '" + item + "' is not S:HEADS").c_str());
        shapes.push_back({std::atoll(item.substr(0, c).c_str()), std::atoll(item.substr(c + 1).c_str())});
        if (shapes.back().s < 1 || shapes.back().heads < 1) return usage(("bad --shapes item '" + item + "'").c_str());
        p = e + 1;
      }
    }
  }
  std::vector<Row> rows;
  try {
    start_gpu_backend({0, false});
    std::printf("%s\n", gpu_description().c_str());
    for (const Shape& s : shapes) rows.push_back(run(s, reps, out));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "attention_fp8_check: %s\n", e.what());
    return 1;
  }
  bool ok = true;
  // rel-L2: of FP8 against bf16 attention of the same dequantized values (the kernel's error, P and O in e4m3;
  // bound 5e-2) and end to end against bf16 of the unquantized values (with q/k/v in e4m3; bound 0.15).
  std::printf("\n%7s %5s | %9s %7s | %9s %7s | %8s | %8s %8s %9s | %8s %8s | %s\n", "S", "heads", "bf16 ms", "TFLOPS",
              "fp8 ms", "TFLOPS", "quant ms", "rel-L2", "e2e", "unwritten", "amax_s", "amax_o", "fp8 path");
  for (const Row& r : rows) {
    const bool good =
        r.fp8_ran && r.unwritten == 0 && r.rel_l2 >= 0 && r.rel_l2 <= 5e-2 && r.rel_l2_e2e >= 0 && r.rel_l2_e2e <= 0.15;
    ok = ok && good;
    std::printf("%7lld %5lld | %9.2f %7.1f | %9.2f %7.1f | %8.2f | %8.2e %8.2e %9lld | %8.2e %8.2e | %s%s\n",
                static_cast<long long>(r.shape.s), static_cast<long long>(r.shape.heads), r.bf16_ms,
                tflops(r.shape, r.bf16_ms), r.fp8_ms, tflops(r.shape, r.fp8_ms), r.quant_ms, r.rel_l2, r.rel_l2_e2e,
                static_cast<long long>(r.unwritten), r.amax.s, r.amax.o, r.fp8_impl.c_str(),
                good ? "" : "  <-- FAILED");
  }
  std::printf("\n[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "%s{\"s\": %lld, \"heads\": %lld, \"bf16_ms\": %.4f, \"bf16_tflops\": %.2f, \"bf16_impl\": \"%s\", "
        "\"fp8_ms\": %.4f, \"fp8_tflops\": %.2f, \"fp8_impl\": \"%s\", \"quantize_ms\": %.4f, \"rel_l2\": %.4e, "
        "\"rel_l2_e2e\": %.4e, \"unwritten\": %lld, \"amax_s\": %.4e, \"amax_o\": %.4e}",
        i ? ",\n " : "", static_cast<long long>(r.shape.s), static_cast<long long>(r.shape.heads), r.bf16_ms,
        tflops(r.shape, r.bf16_ms), r.bf16_impl.c_str(), r.fp8_ms, tflops(r.shape, r.fp8_ms), r.fp8_impl.c_str(),
        r.quant_ms, r.rel_l2, r.rel_l2_e2e, static_cast<long long>(r.unwritten), r.amax.s, r.amax.o);
  }
  std::printf("]\n%s\n", ok ? "OK" : "FAILED (see the rows marked above and the log)");
  return ok ? 0 : 1;
}

// Our Hopper attention kernels (src/backend/cuda/attention/wgmma_*.cu) on one GPU: correctness against an f32
// reference, determinism, independence from the head grouping, and TFLOPS. Builds alone with nvcc (no h3
// library), so a kernel change can be tried in one short device call:
//
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc bench/attention_wgmma_check.cu \
//        src/backend/cuda/attention/wgmma_bf16.cu src/backend/cuda/attention/wgmma_fp8.cu -o attention_wgmma_check
//   attention_wgmma_check [--reps N] [--data uniform|rising] [--qk-descale POW2]
//                         [--kinds bf16,fp8,fp8-O8,fp8-f16,fp8-f16-O8] [--shapes NQ:NK:HEADS,...]
//
// Kinds: bf16 (bf16 q, k, v, o); fp8 (e4m3 q, k, v with per-tensor descales, bf16 o); fp8-O8 (the same with an e4m3
// o and its descale); fp8-f16, fp8-f16-O8 (the same with f16 scores, q and k descaled by 1/4 whatever --qk-descale
// says, so that |q8 . k8| stays within the kernel's bound). For each shape: q, k uniform in [-2.5, 2.5] and v in
// [-1, 1] (scores of std ~2 after the 1/sqrt(128) scale: a softmax neither flat nor one-hot), hashed on the device;
// for FP8 the e4m3 values and power-of-two descales, the reference reading their exact bf16 values. The output is first
// poisoned with NaN bytes. Checked:
//   - rel-L2 and max |error| against the f32 reference (exact exp, f32 accumulation) on every row of small shapes
//     and on 97 rows spread over long ones (first and last included), all heads: bf16 gives ~2e-3 (fails above
//     1e-2), FP8 ~2-3e-2 from the softmax weights in e4m3 (fails above 5e-2, 6e-2 with an e4m3 o);
//   - no NaN anywhere in the output (every element written);
//   - a second run bitwise equal to the first;
//   - FP8: the V^T transpose alone against the host's, byte for byte (every column, or every 61st on long shapes);
//   - bf16: the heads computed in groups (calls of 1 and of 7 heads on offset pointers, same row stride) bitwise
//     equal to all heads in one call (what deterministic mode and ulysses ranks with other head counts rely on;
//     the FP8 entry wants ld = heads * 128, so its "groups" column stays ok);
// Then the median time of --reps runs and TFLOPS = 4 nq nk heads 128 / t. Prints a table, then JSON rows.
// Exits 1 when a check fails, 2 on a usage error.
#include <cuda_bf16.h>
#include <cuda_fp8.h>
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

#include "backend/cuda/attention/wgmma.h"

namespace {

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cudaError_t e_ = (call);                                                                      \
    if (e_ != cudaSuccess) {                                                                      \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(e_)); \
      std::exit(1);                                                                               \
    }                                                                                             \
  } while (0)

struct Shape {
  int64_t nq, nk, heads;
};

__device__ uint64_t mix(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

// --data rising: the first 8 channels of every head hold amp in q (ramp 1) and a ramp from -amp to amp over the
// rows of k (ramp 2), so that every row's scores grow along the keys and its running maximum moves on nearly every
// tile (the softmax's rescale path, and its slack, at work). ramp 0: uniform values only.
__device__ double value_at(uint64_t seed, int64_t i, float amp, int ramp, int64_t ld, int64_t rows) {
  const double u = static_cast<double>(mix(seed ^ (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull)) >> 11) /
                   9007199254740992.0;  // [0, 1)
  if (ramp && (i % ld) % 128 < 8) {
    if (ramp == 1) return amp;
    return -amp + 2.0 * amp * static_cast<double>(i / ld) / static_cast<double>(rows > 1 ? rows - 1 : 1);
  }
  return (2 * u - 1) * amp;
}

__global__ void fill_uniform(__nv_bfloat16* x, int64_t n, uint64_t seed, float amp, int ramp, int64_t ld) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    x[i] = __float2bfloat16_rn(static_cast<float>(value_at(seed, i, amp, ramp, ld, n / ld)));
}

// e4m3 values of (2 u - 1) amp / descale and their exact bf16 values (descale a power of two).
__global__ void fill_fp8(uint8_t* x8, __nv_bfloat16* xb, int64_t n, uint64_t seed, float amp, float descale, int ramp,
                         int64_t ld) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const __nv_fp8_e4m3 q(static_cast<float>(value_at(seed, i, amp, ramp, ld, n / ld)) / descale);
    x8[i] = q.__x;
    xb[i] = __float2bfloat16_rn(static_cast<float>(q) * descale);
  }
}

// One block per (sampled row, head), 64 threads: thread t runs an online softmax over keys t, t + 64, ...
// with its own 128-wide accumulator, then the 64 partial results are merged (each thread finishing two of the
// 128 columns).
__global__ void reference(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v, const int* rows,
                          float* out, int nk, int ld) {
  constexpr int kT = 64;
  __shared__ float qs[128];
  __shared__ float part_m[kT], part_l[kT];
  __shared__ float part_acc[kT][129];
  const int row = rows[blockIdx.x], h = blockIdx.y, t = threadIdx.x;
  for (int d = t; d < 128; d += kT) qs[d] = __bfloat162float(q[static_cast<int64_t>(row) * ld + h * 128 + d]);
  __syncthreads();
  float acc[128];
  for (int d = 0; d < 128; ++d) acc[d] = 0.f;
  float m = -INFINITY, l = 0.f;
  const float scale = 1.f / sqrtf(128.f);
  for (int j = t; j < nk; j += kT) {
    const __nv_bfloat16* kr = k + static_cast<int64_t>(j) * ld + h * 128;
    float s = 0.f;
    for (int d = 0; d < 128; ++d) s = fmaf(qs[d], __bfloat162float(kr[d]), s);
    s *= scale;
    const float nm = fmaxf(m, s);
    const float corr = expf(m - nm), p = expf(s - nm);
    l = l * corr + p;
    const __nv_bfloat16* vr = v + static_cast<int64_t>(j) * ld + h * 128;
    for (int d = 0; d < 128; ++d) acc[d] = fmaf(p, __bfloat162float(vr[d]), acc[d] * corr);
    m = nm;
  }
  part_m[t] = m;
  part_l[t] = l;
  for (int d = 0; d < 128; ++d) part_acc[t][d] = acc[d];
  __syncthreads();
  float mx = -INFINITY;
  for (int i = 0; i < kT; ++i) mx = fmaxf(mx, part_m[i]);
  for (int d = t; d < 128; d += kT) {
    float num = 0.f, den = 0.f;
    for (int i = 0; i < kT; ++i) {
      if (part_m[i] == -INFINITY) continue;
      const float w = expf(part_m[i] - mx);
      num += w * part_acc[i][d];
      den += w * part_l[i];
    }
    out[(static_cast<int64_t>(blockIdx.x) * gridDim.y + h) * 128 + d] = num / den;
  }
}

enum class Kind { bf16, fp8, fp8_out, fp8_f16, fp8_f16_out };
const char* kind_name(Kind k) {
  switch (k) {
    case Kind::bf16:
      return "bf16";
    case Kind::fp8:
      return "fp8";
    case Kind::fp8_out:
      return "fp8-O8";
    case Kind::fp8_f16:
      return "fp8-f16";
    case Kind::fp8_f16_out:
      return "fp8-f16-O8";
  }
  return "?";
}
bool fp8_out(Kind k) {
  return k == Kind::fp8_out || k == Kind::fp8_f16_out;
}
bool f16_scores(Kind k) {
  return k == Kind::fp8_f16 || k == Kind::fp8_f16_out;
}

struct Row {
  Shape sh;
  Kind kind = Kind::bf16;
  int64_t checked_rows = 0;
  double rel_l2 = -1, max_abs = -1, ms = 0, tflops = 0, transpose_ms = 0;
  unsigned long long nan = 0;
  bool repeat_equal = false, groups_equal = false, transpose_ok = true;  // transpose: FP8's V^T, byte for byte
  std::string error;
  // bf16: ~2e-3 (bf16 P and output); FP8: the softmax weights in e4m3 (3 mantissa bits), and O too for fp8-O8.
  double tolerance() const { return kind == Kind::bf16 ? 1e-2 : fp8_out(kind) ? 6e-2 : 5e-2; }
  bool ok() const {
    return error.empty() && rel_l2 >= 0 && rel_l2 <= tolerance() && nan == 0 && repeat_equal && groups_equal &&
           transpose_ok;
  }
};

float host_value(const std::vector<uint8_t>& bytes, int64_t i, Kind kind, float descale) {
  if (fp8_out(kind)) {
    __nv_fp8_e4m3 q;
    q.__x = bytes[i];
    return static_cast<float>(q) * descale;
  }
  __nv_bfloat16 b;
  std::memcpy(&b, &bytes[2 * i], 2);
  return __bfloat162float(b);
}

Row run(const Shape& sh, int reps, Kind kind, bool rising, float qk_descale) {
  Row r;
  r.sh = sh;
  r.kind = kind;
  const bool fp8 = kind != Kind::bf16;
  const int64_t ld = sh.heads * 128, nqe = sh.nq * ld, nke = sh.nk * ld;
  const size_t out_bytes = static_cast<size_t>(nqe) * (fp8_out(kind) ? 1 : 2);
  __nv_bfloat16 *q, *k, *v;
  uint8_t *q8 = nullptr, *k8 = nullptr, *v8 = nullptr, *vt = nullptr, *o, *o2;
  float* scales;  // dq, dk, dv, o descale
  CHECK(cudaMalloc(&q, nqe * 2));
  CHECK(cudaMalloc(&k, nke * 2));
  CHECK(cudaMalloc(&v, nke * 2));
  CHECK(cudaMalloc(&o, out_bytes));
  CHECK(cudaMalloc(&o2, out_bytes));
  CHECK(cudaMalloc(&scales, 16 * 4));
  // Power-of-two descales keep the e4m3 values exact in bf16: q, k within [-2.5, 2.5] (|q8| <= 320 at the default
  // 1/128), v [-1, 1].
  // f16 scores: 1/4, so |q8|, |k8| <= 10 and |q8 . k8| <= 128 x 100, within kFp8F16ScoreBound.
  if (f16_scores(kind)) qk_descale = 0.25f;
  const float desc_host[4] = {qk_descale, qk_descale, 1.f / 256, 0.f};
  CHECK(cudaMemcpy(scales, desc_host, sizeof(desc_host), cudaMemcpyHostToDevice));
  if (fp8) {
    CHECK(cudaMalloc(&q8, nqe));
    CHECK(cudaMalloc(&k8, nke));
    CHECK(cudaMalloc(&v8, nke));
    CHECK(cudaMalloc(&vt, ld * h3::cuda::attention_wgmma_fp8_vt_cols(sh.nk)));
    fill_fp8<<<1024, 256>>>(q8, q, nqe, 0x51, 2.5f, desc_host[0], rising ? 1 : 0, ld);
    fill_fp8<<<1024, 256>>>(k8, k, nke, 0x52, 2.5f, desc_host[1], rising ? 2 : 0, ld);
    fill_fp8<<<1024, 256>>>(v8, v, nke, 0x53, 1.0f, desc_host[2], 0, ld);
  } else {
    fill_uniform<<<1024, 256>>>(q, nqe, 0x51, 2.5f, rising ? 1 : 0, ld);
    fill_uniform<<<1024, 256>>>(k, nke, 0x52, 2.5f, rising ? 2 : 0, ld);
    fill_uniform<<<1024, 256>>>(v, nke, 0x53, 1.0f, 0, ld);
  }
  // FP8: the V^T transpose alone, every byte against the host's (key_of_slot's order, zero past nk).
  if (fp8) {
    const int64_t nkp = h3::cuda::attention_wgmma_fp8_vt_cols(sh.nk);
    CHECK(cudaMemset(vt, 0xff, ld * nkp));
    h3::cuda::attention_wgmma_fp8_transpose_v(v8, vt, sh.nk, ld, nullptr);
    CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> hv(nke), hvt(ld * nkp);
    CHECK(cudaMemcpy(hv.data(), v8, nke, cudaMemcpyDeviceToHost));
    CHECK(cudaMemcpy(hvt.data(), vt, ld * nkp, cudaMemcpyDeviceToHost));
    auto key_of_slot = [](int64_t s) { return (s / 16) * 16 + ((s % 4) / 2) * 8 + 2 * ((s % 16) / 4) + (s % 2); };
    // Every column of small shapes; of long ones every 61st and the last (the host loop is the slow part).
    const int64_t step = ld * nkp > (int64_t{1} << 26) ? 61 : 1;
    auto next = [&](int64_t c) { return c == ld - 1 ? ld : std::min(c + step, ld - 1); };
    for (int64_t c = 0; c < ld && r.transpose_ok; c = next(c))
      for (int64_t k = 0; k < nkp; ++k) {
        const int64_t key = (k / 32) * 32 + key_of_slot(k % 32);
        const uint8_t want = key < sh.nk ? hv[key * ld + c] : 0;
        if (hvt[c * nkp + k] != want) {
          r.transpose_ok = false;
          break;
        }
      }
  }
  auto call = [&](void* out) {
    if (fp8)
      h3::cuda::attention_wgmma_fp8(q8, k8, v8, scales, scales + 1, scales + 2, vt, out, fp8_out(kind), scales + 3,
                                    sh.nq, sh.nk, sh.heads, 128, ld, nullptr, f16_scores(kind));
    else
      h3::cuda::attention_wgmma(q, k, v, out, sh.nq, sh.nk, sh.heads, 128, ld, nullptr);
  };
  CHECK(cudaMemset(o, 0xff, out_bytes));  // NaN in bf16 and in e4m3
  CHECK(cudaMemset(o2, 0xff, out_bytes));
  try {
    call(o);
    CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> got(out_bytes);
    CHECK(cudaMemcpy(got.data(), o, out_bytes, cudaMemcpyDeviceToHost));
    float o_descale = 1.f;
    if (fp8_out(kind)) CHECK(cudaMemcpy(&o_descale, scales + 3, 4, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < nqe; ++i) r.nan += std::isnan(host_value(got, i, kind, o_descale)) ? 1 : 0;

    // Reference rows: all of a small shape, else 97 spread over [0, nq) with both ends.
    std::vector<int> rows;
    if (sh.nq * sh.heads <= 4096) {
      for (int i = 0; i < sh.nq; ++i) rows.push_back(i);
    } else {
      for (int i = 0; i < 97; ++i) rows.push_back(static_cast<int>((sh.nq - 1) * i / 96));
    }
    r.checked_rows = static_cast<int64_t>(rows.size());
    int* rows_d;
    float* ref_d;
    CHECK(cudaMalloc(&rows_d, rows.size() * 4));
    CHECK(cudaMalloc(&ref_d, rows.size() * ld * 4));
    CHECK(cudaMemcpy(rows_d, rows.data(), rows.size() * 4, cudaMemcpyHostToDevice));
    reference<<<dim3(static_cast<unsigned>(rows.size()), static_cast<unsigned>(sh.heads)), 64>>>(
        q, k, v, rows_d, ref_d, static_cast<int>(sh.nk), static_cast<int>(ld));
    CHECK(cudaGetLastError());
    std::vector<float> ref(rows.size() * ld);
    CHECK(cudaMemcpy(ref.data(), ref_d, ref.size() * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < ld; ++c) {
        const double want = ref[i * ld + c], have = host_value(got, rows[i] * ld + c, kind, o_descale);
        num += (have - want) * (have - want);
        den += want * want;
        mx = std::max(mx, std::fabs(have - want));
      }
    r.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
    r.max_abs = mx;
    CHECK(cudaFree(rows_d));
    CHECK(cudaFree(ref_d));

    call(o2);
    CHECK(cudaDeviceSynchronize());
    std::vector<uint8_t> again(out_bytes);
    CHECK(cudaMemcpy(again.data(), o2, out_bytes, cudaMemcpyDeviceToHost));
    r.repeat_equal = std::memcmp(got.data(), again.data(), out_bytes) == 0;

    // Head groups on offset pointers (bf16 only: the FP8 entry wants ld = heads * 128).
    r.groups_equal = true;
    for (int64_t g : {int64_t{1}, int64_t{7}}) {
      if (fp8 || g >= sh.heads) continue;
      CHECK(cudaMemset(o2, 0xff, out_bytes));
      __nv_bfloat16* ob = reinterpret_cast<__nv_bfloat16*>(o2);
      for (int64_t h0 = 0; h0 < sh.heads; h0 += g) {
        const int64_t n = std::min(g, sh.heads - h0);
        h3::cuda::attention_wgmma(q + h0 * 128, k + h0 * 128, v + h0 * 128, ob + h0 * 128, sh.nq, sh.nk, n, 128, ld,
                                  nullptr);
      }
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(again.data(), o2, out_bytes, cudaMemcpyDeviceToHost));
      r.groups_equal = r.groups_equal && std::memcmp(got.data(), again.data(), out_bytes) == 0;
    }

    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    auto median_ms = [&](auto f) {  // of `reps` runs of f, each between two events
      std::vector<float> ms;
      for (int i = 0; i < reps; ++i) {
        CHECK(cudaEventRecord(a));
        f();
        CHECK(cudaEventRecord(b));
        CHECK(cudaEventSynchronize(b));
        float t = 0;
        CHECK(cudaEventElapsedTime(&t, a, b));
        ms.push_back(t);
      }
      std::sort(ms.begin(), ms.end());
      return static_cast<double>(ms[ms.size() / 2]);
    };
    r.ms = median_ms([&] { call(o2); });
    if (fp8)  // the V^T transpose alone (part of every FP8 call above)
      r.transpose_ms = median_ms([&] { h3::cuda::attention_wgmma_fp8_transpose_v(v8, vt, sh.nk, ld, nullptr); });
    r.tflops = 4.0 * sh.nq * sh.nk * sh.heads * 128 / (r.ms * 1e-3) / 1e12;
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  for (void* p : {static_cast<void*>(q), static_cast<void*>(k), static_cast<void*>(v), static_cast<void*>(o),
                  static_cast<void*>(o2), static_cast<void*>(scales), static_cast<void*>(q8), static_cast<void*>(k8),
                  static_cast<void*>(v8), static_cast<void*>(vt)})
    if (p) CHECK(cudaFree(p));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  bool rising = false;
  float qk_descale = 1.f / 128;
  std::vector<Kind> kinds{Kind::bf16, Kind::fp8, Kind::fp8_out, Kind::fp8_f16, Kind::fp8_f16_out};
  std::vector<Shape> shapes{{1, 1, 1},      {77, 77, 2},     {1000, 1000, 3},    {300, 777, 2},      {129, 4100, 1},
                            {4100, 129, 2}, {2048, 2048, 4}, {14908, 14908, 56}, {37830, 37830, 56}, {37830, 37830, 7}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--data" && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "uniform" && d != "rising") {
        std::fprintf(stderr, "attention_wgmma_check: --data takes uniform or rising\n");
        return 2;
      }
      rising = d == "rising";
    } else if (a == "--qk-descale" && i + 1 < argc) {
      qk_descale = std::strtof(argv[++i], nullptr);
      int e = 0;
      if (!(qk_descale > 0.f) || std::frexp(qk_descale, &e) != 0.5f) {
        std::fprintf(stderr, "attention_wgmma_check: --qk-descale takes a power of two (q8 = q / it)\n");
        return 2;
      }
    } else if (a == "--kinds" && i + 1 < argc) {
      kinds.clear();
      const std::string list = argv[++i];
      for (Kind k : {Kind::bf16, Kind::fp8, Kind::fp8_out, Kind::fp8_f16, Kind::fp8_f16_out})
        if (("," + list + ",").find("," + std::string(kind_name(k)) + ",") != std::string::npos) kinds.push_back(k);
      if (kinds.empty()) {
        std::fprintf(stderr, "attention_wgmma_check: --kinds takes a list of bf16, fp8, fp8-O8, fp8-f16, fp8-f16-O8\n");
        return 2;
      }
    } else if (a == "--shapes" && i + 1 < argc) {
      shapes.clear();
      std::string list = argv[++i];
      size_t p = 0;
      while (p < list.size()) {
        const size_t e = std::min(list.find(',', p), list.size());
        Shape s{};
        if (std::sscanf(list.substr(p, e - p).c_str(), "%ld:%ld:%ld", &s.nq, &s.nk, &s.heads) != 3 || s.nq < 1 ||
            s.nk < 1 || s.heads < 1) {
          std::fprintf(stderr, "attention_wgmma_check: bad shape '%s' (want NQ:NK:HEADS, each >= 1)\n",
                       list.substr(p, e - p).c_str());
          return 2;
        }
        shapes.push_back(s);
        p = e + 1;
      }
    } else {
      std::fprintf(stderr,
                   "usage: attention_wgmma_check [--reps N] [--data uniform|rising] [--qk-descale POW2] "
                   "[--kinds bf16,fp8,fp8-O8,fp8-f16,fp8-f16-O8] [--shapes NQ:NK:HEADS,...]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("%-6s %7s %7s %5s | %6s %9s %9s %4s %6s %6s | %9s %8s | %s\n", "kind", "nq", "nk", "heads", "rows",
              "rel-L2", "max|err|", "NaN", "repeat", "groups", "ms", "TFLOPS", "result");
  std::vector<Row> rows;
  bool all = true;
  for (Kind kind : kinds)
    for (const Shape& s : shapes) {
      Row r = run(s, reps, kind, rising, qk_descale);
      all = all && r.ok();
      std::printf("%-6s %7ld %7ld %5ld | %6ld %9.2e %9.2e %4llu %6s %6s | %9.3f %8.1f | %s%s\n", kind_name(kind), s.nq,
                  s.nk, s.heads, r.checked_rows, r.rel_l2, r.max_abs, r.nan, r.repeat_equal ? "equal" : "DIFF",
                  r.groups_equal ? "equal" : "DIFF", r.ms, r.tflops, r.ok() ? "ok" : "FAIL ",
                  r.transpose_ok ? r.error.c_str() : "V^T transpose wrong");
      if (r.transpose_ms > 0)
        std::printf("       V^T transpose alone: %.3f ms, %.0f GB/s read + written\n", r.transpose_ms,
                    2.0 * s.nk * s.heads * 128 / (r.transpose_ms * 1e-3) / 1e9);
      std::fflush(stdout);
      rows.push_back(r);
    }
  std::printf("[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "%s{\"kind\": \"%s\", \"nq\": %ld, \"nk\": %ld, \"heads\": %ld, \"rel_l2\": %.4e, \"max_abs\": %.4e, \"nan\": "
        "%llu, "
        "\"repeat_equal\": %s, \"groups_equal\": %s, \"transpose_ok\": %s, \"transpose_ms\": %.4f, \"ms\": %.4f, "
        "\"tflops\": %.2f, \"ok\": %s}",
        i ? ",\n " : "", kind_name(r.kind), r.sh.nq, r.sh.nk, r.sh.heads, r.rel_l2, r.max_abs, r.nan,
        r.repeat_equal ? "true" : "false", r.groups_equal ? "true" : "false", r.transpose_ok ? "true" : "false",
        r.transpose_ms, r.ms, r.tflops, r.ok() ? "true" : "false");
  }
  std::printf("]\n");
  return all ? 0 : 1;
}

// Our Hopper attention kernel (src/backend/cuda/cuda_attention_wgmma.cu) on one GPU: correctness against an
// f32 reference of the same bf16 inputs, determinism, independence from the head grouping, and TFLOPS. Builds
// alone with nvcc (no h3 library), so a kernel change can be tried in one short device call:
//
//   nvcc -O3 -std=c++20 -gencode arch=compute_90a,code=sm_90a -Isrc bench/attention_wgmma_check.cu \
//        src/backend/cuda/cuda_attention_wgmma.cu -o attention_wgmma_check
//   attention_wgmma_check [--reps N] [--shapes NQ:NK:HEADS,...]
//
// For each shape: q, k uniform in [-2.5, 2.5] and v in [-1, 1] (scores of std ~2 after the 1/sqrt(128) scale,
// a softmax neither flat nor one-hot), hashed on the device; the output first poisoned with NaN bytes.
// Checked:
//   - rel-L2 and max |error| against the f32 reference (exact exp, f32 accumulation, merged in f32) on every
//   row of
//     small shapes and on 97 rows spread over long ones (the first and last included), all heads; bf16 P and
//     a bf16 output give ~3e-3; fails above 1e-2;
//   - no NaN anywhere in the output (every element written);
//   - a second run bitwise equal to the first;
//   - the heads computed in groups (calls of 1 and of 7 heads on offset pointers, same row stride) bitwise
//   equal to
//     all heads in one call (what deterministic mode and ulysses ranks with different head counts rely on).
// Then the median time of --reps runs and TFLOPS = 4 nq nk heads 128 / t. Prints a table, then JSON rows.
// Exits 1 when a check fails, 2 on a usage error.
#include <cuda_bf16.h>
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

#include "backend/cuda/cuda_attention_wgmma.h"

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

__global__ void fill_uniform(__nv_bfloat16* x, int64_t n, uint64_t seed, float amp) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const double u =
        static_cast<double>(mix(seed ^ (static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull)) >> 11) /
        9007199254740992.0;  // [0, 1)
    x[i] = __float2bfloat16_rn(static_cast<float>((2 * u - 1) * amp));
  }
}

// One block per (sampled row, head), 64 threads: thread t runs an online softmax over keys t, t + 64, ...
// with its own 128-wide accumulator, then the 64 partial results are merged (each thread finishing two of the
// 128 columns).
__global__ void reference(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                          const int* rows, float* out, int nk, int ld) {
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

__global__ void count_nan(const __nv_bfloat16* x, int64_t n, unsigned long long* count) {
  unsigned long long c = 0;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    c += isnan(__bfloat162float(x[i])) ? 1 : 0;
  if (c) atomicAdd(count, c);
}

struct Row {
  Shape sh;
  int64_t checked_rows = 0;
  double rel_l2 = -1, max_abs = -1, ms = 0, tflops = 0;
  unsigned long long nan = 0;
  bool repeat_equal = false, groups_equal = false;
  std::string error;
  bool ok() const {
    return error.empty() && rel_l2 >= 0 && rel_l2 <= 1e-2 && nan == 0 && repeat_equal && groups_equal;
  }
};

Row run(const Shape& sh, int reps) {
  Row r;
  r.sh = sh;
  const int64_t ld = sh.heads * 128, nqe = sh.nq * ld, nke = sh.nk * ld;
  __nv_bfloat16 *q, *k, *v, *o, *o2;
  CHECK(cudaMalloc(&q, nqe * 2));
  CHECK(cudaMalloc(&k, nke * 2));
  CHECK(cudaMalloc(&v, nke * 2));
  CHECK(cudaMalloc(&o, nqe * 2));
  CHECK(cudaMalloc(&o2, nqe * 2));
  fill_uniform<<<1024, 256>>>(q, nqe, 0x51, 2.5f);
  fill_uniform<<<1024, 256>>>(k, nke, 0x52, 2.5f);
  fill_uniform<<<1024, 256>>>(v, nke, 0x53, 1.0f);
  CHECK(cudaMemset(o, 0xff, nqe * 2));
  CHECK(cudaMemset(o2, 0xff, nqe * 2));
  try {
    h3::cuda::attention_wgmma(q, k, v, o, sh.nq, sh.nk, sh.heads, 128, ld, nullptr);
    CHECK(cudaDeviceSynchronize());
    unsigned long long* cnt;
    CHECK(cudaMalloc(&cnt, 8));
    CHECK(cudaMemset(cnt, 0, 8));
    count_nan<<<1024, 256>>>(o, nqe, cnt);
    CHECK(cudaMemcpy(&r.nan, cnt, 8, cudaMemcpyDeviceToHost));
    CHECK(cudaFree(cnt));

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
    std::vector<__nv_bfloat16> got(nqe);
    CHECK(cudaMemcpy(got.data(), o, nqe * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0, mx = 0;
    for (size_t i = 0; i < rows.size(); ++i)
      for (int64_t c = 0; c < ld; ++c) {
        const double want = ref[i * ld + c], have = __bfloat162float(got[rows[i] * ld + c]);
        num += (have - want) * (have - want);
        den += want * want;
        mx = std::max(mx, std::fabs(have - want));
      }
    r.rel_l2 = std::sqrt(num / std::max(den, 1e-300));
    r.max_abs = mx;
    CHECK(cudaFree(rows_d));
    CHECK(cudaFree(ref_d));

    h3::cuda::attention_wgmma(q, k, v, o2, sh.nq, sh.nk, sh.heads, 128, ld, nullptr);
    CHECK(cudaDeviceSynchronize());
    std::vector<__nv_bfloat16> again(nqe);
    CHECK(cudaMemcpy(again.data(), o2, nqe * 2, cudaMemcpyDeviceToHost));
    r.repeat_equal = std::memcmp(got.data(), again.data(), nqe * 2) == 0;

    r.groups_equal = true;
    for (int64_t g : {int64_t{1}, int64_t{7}}) {
      if (g >= sh.heads) continue;
      CHECK(cudaMemset(o2, 0xff, nqe * 2));
      for (int64_t h0 = 0; h0 < sh.heads; h0 += g) {
        const int64_t n = std::min(g, sh.heads - h0);
        h3::cuda::attention_wgmma(q + h0 * 128, k + h0 * 128, v + h0 * 128, o2 + h0 * 128, sh.nq, sh.nk, n,
                                  128, ld, nullptr);
      }
      CHECK(cudaDeviceSynchronize());
      CHECK(cudaMemcpy(again.data(), o2, nqe * 2, cudaMemcpyDeviceToHost));
      r.groups_equal = r.groups_equal && std::memcmp(got.data(), again.data(), nqe * 2) == 0;
    }

    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    std::vector<float> ms;
    for (int i = 0; i < reps; ++i) {
      CHECK(cudaEventRecord(a));
      h3::cuda::attention_wgmma(q, k, v, o2, sh.nq, sh.nk, sh.heads, 128, ld, nullptr);
      CHECK(cudaEventRecord(b));
      CHECK(cudaEventSynchronize(b));
      float t = 0;
      CHECK(cudaEventElapsedTime(&t, a, b));
      ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    r.ms = ms[ms.size() / 2];
    r.tflops = 4.0 * sh.nq * sh.nk * sh.heads * 128 / (r.ms * 1e-3) / 1e12;
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  CHECK(cudaFree(q));
  CHECK(cudaFree(k));
  CHECK(cudaFree(v));
  CHECK(cudaFree(o));
  CHECK(cudaFree(o2));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  int reps = 5;
  std::vector<Shape> shapes{{1, 1, 1},          {77, 77, 2},      {1000, 1000, 3}, {300, 777, 2},
                            {129, 4100, 1},     {4100, 129, 2},   {2048, 2048, 4}, {14908, 14908, 56},
                            {37830, 37830, 56}, {37830, 37830, 7}};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--reps" && i + 1 < argc) {
      reps = std::max(1, std::atoi(argv[++i]));
    } else if (a == "--shapes" && i + 1 < argc) {
      shapes.clear();
      std::string list = argv[++i];
      size_t p = 0;
      while (p < list.size()) {
        const size_t e = std::min(list.find(',', p), list.size());
        Shape s{};
        if (std::sscanf(list.substr(p, e - p).c_str(), "%ld:%ld:%ld", &s.nq, &s.nk, &s.heads) != 3 ||
            s.nq < 1 || s.nk < 1 || s.heads < 1) {
          std::fprintf(stderr, "attention_wgmma_check: bad shape '%s' (want NQ:NK:HEADS, each >= 1)\n",
                       list.substr(p, e - p).c_str());
          return 2;
        }
        shapes.push_back(s);
        p = e + 1;
      }
    } else {
      std::fprintf(stderr, "usage: attention_wgmma_check [--reps N] [--shapes NQ:NK:HEADS,...]\n");
      return 2;
    }
  }
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("GPU: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  std::printf("%7s %7s %5s | %6s %9s %9s %4s %6s %6s | %9s %8s | %s\n", "nq", "nk", "heads", "rows", "rel-L2",
              "max|err|", "NaN", "repeat", "groups", "ms", "TFLOPS", "result");
  std::vector<Row> rows;
  bool all = true;
  for (const Shape& s : shapes) {
    Row r = run(s, reps);
    all = all && r.ok();
    std::printf("%7ld %7ld %5ld | %6ld %9.2e %9.2e %4llu %6s %6s | %9.3f %8.1f | %s%s\n", s.nq, s.nk, s.heads,
                r.checked_rows, r.rel_l2, r.max_abs, r.nan, r.repeat_equal ? "equal" : "DIFF",
                r.groups_equal ? "equal" : "DIFF", r.ms, r.tflops, r.ok() ? "ok" : "FAIL ", r.error.c_str());
    std::fflush(stdout);
    rows.push_back(r);
  }
  std::printf("[");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    std::printf(
        "%s{\"nq\": %ld, \"nk\": %ld, \"heads\": %ld, \"rel_l2\": %.4e, \"max_abs\": %.4e, \"nan\": %llu, "
        "\"repeat_equal\": %s, \"groups_equal\": %s, \"ms\": %.4f, \"tflops\": %.2f, \"ok\": %s}",
        i ? ",\n " : "", r.sh.nq, r.sh.nk, r.sh.heads, r.rel_l2, r.max_abs, r.nan,
        r.repeat_equal ? "true" : "false", r.groups_equal ? "true" : "false", r.ms, r.tflops,
        r.ok() ? "true" : "false");
  }
  std::printf("]\n");
  return all ? 0 : 1;
}

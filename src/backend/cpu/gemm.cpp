// CPU reference entries of the GEMM family (ops/gemm.h) in f32 and f64: linear (and linear_acc, the same on host
// tensors) through our fixed-order GEMM or, with the cpu_gemm knob, OpenBLAS.
//
// y[N,M] = x[N,K] * w[M,K]^T with a reduction order that depends only on K: every output element is a dot product
// accumulated in 8 interleaved lanes (lane l takes k = l, l+8, ...), the lanes combined in a fixed tree, the tail
// added last. No output depends on N, M, the row or column it sits at, the tile it lands in, or the thread count,
// so a row-sharded run gives the same bits as the whole (OpenBLAS does not: its tiles change the order).
// The explicit lanes vectorise without reassociation, so the SSE2 and AVX2 clones compute identical bits.
#include <cblas.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "backend/cpu/ops.h"
#include "core/knobs.h"
#include "core/parallel.h"

namespace h3::cpu {

namespace {

constexpr int kLanes = 8;

template <typename T>
inline T combine(const T (&a)[kLanes]) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

// 2 rows x 4 columns of outputs at once; `rows`/`cols` may be smaller at the edges (same arithmetic per element).
template <typename T>
__attribute__((target_clones("avx2", "default"))) void tile_2x4(const T* x, const T* w, T* y, int64_t k, int64_t ldy,
                                                                int rows, int cols) {
  T acc[2][4][kLanes] = {};
  const T* xr[2] = {x, x + (rows > 1 ? k : 0)};
  const T* wr[4];
  for (int c = 0; c < 4; ++c) wr[c] = w + (c < cols ? c : 0) * k;
  const int64_t kv = k - k % kLanes;
  for (int64_t kk = 0; kk < kv; kk += kLanes)
    for (int r = 0; r < 2; ++r)
      for (int c = 0; c < 4; ++c)
        for (int l = 0; l < kLanes; ++l) acc[r][c][l] += xr[r][kk + l] * wr[c][kk + l];
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c) {
      T s = combine(acc[r][c]);
      for (int64_t kk = kv; kk < k; ++kk) s += xr[r][kk] * wr[c][kk];
      y[r * ldy + c] = s;
    }
}

}  // namespace

template <typename T>
void gemm_nt(int64_t n, int64_t m, int64_t k, const T* x, const T* w, T* y) {
  constexpr int64_t kRowTile = 2, kColTile = 4, kColBlock = 64;  // a block of columns stays in cache
  const int64_t row_tiles = (n + kRowTile - 1) / kRowTile;
  const int64_t col_blocks = (m + kColBlock - 1) / kColBlock;
  parallel_for(
      row_tiles * col_blocks,
      [&](int64_t b, int64_t e) {
        for (int64_t task = b; task < e; ++task) {
          const int64_t cb = task % col_blocks, rt = task / col_blocks;
          const int64_t r0 = rt * kRowTile, rows = std::min(kRowTile, n - r0);
          const int64_t c_end = std::min(m, (cb + 1) * kColBlock);
          for (int64_t c0 = cb * kColBlock; c0 < c_end; c0 += kColTile)
            tile_2x4<T>(x + r0 * k, w + c0 * k, y + r0 * m + c0, k, m, static_cast<int>(rows),
                        static_cast<int>(std::min(kColTile, c_end - c0)));
        }
      },
      4);
}

template void gemm_nt<float>(int64_t, int64_t, int64_t, const float*, const float*, float*);
template void gemm_nt<double>(int64_t, int64_t, int64_t, const double*, const double*, double*);

namespace {

// The cpu_gemm knob (H3_CPU_GEMM=openblas) trades the fixed reduction order (bitwise results across world sizes)
// for OpenBLAS speed.
template <typename T>
void dispatch_gemm(int64_t n, int64_t m, int64_t k, const T* x, const T* w, T* y) {
  if (!knobs().cpu_gemm_openblas)
    gemm_nt<T>(n, m, k, x, w, y);
  else if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f, x, k, w, k, 0.0f, y, m);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0, x, k, w, k, 0.0, y, m);
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t n = x.dim(0), m = w.dim(0), k = x.dim(1);
  Tensor y(x.dtype(), {n, m});
  if (n == 0) return y;
  auto run = [&]<typename T>(T) {
    dispatch_gemm<T>(n, m, k, x.data<T>(), w.data<T>(), y.data<T>());
    if (bias) {
      const T* b = bias->data<T>();
      T* o = y.data<T>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < m; ++c) o[r * m + c] += b[c];
    }
  };
  if (x.dtype() == DType::f32)
    run(float{});
  else
    run(double{});
  return y;
}

Tensor linear_acc(const Tensor& x, const Tensor& w) {
  return linear(x, w, nullptr);
}

}  // namespace h3::cpu

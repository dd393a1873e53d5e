// The layout family (backend/cuda/layout.h): row gathers and scatters by an index (whole rows copied in 16-, 4-, 2-
// or 1-byte units), the ViT decoder's unpatchify and the video decode's per-pixel stitch (its blend rounds every
// product and sum on its own, as the CPU backend does).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/layout.h"

namespace h3::cuda {

namespace {

template <typename U, bool kScatter>
__global__ void move_rows_kernel(const U* x, const int32_t* idx, U* out, int64_t n, int64_t units) {
  const int64_t total = n * units;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / units, u = i % units, other = idx[r];
    if (kScatter)
      out[other * units + u] = x[i];
    else
      out[i] = x[other * units + u];
  }
}

template <bool kScatter>
cudaError_t move_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  if (n == 0 || row_bytes == 0) return cudaSuccess;
  auto go = [&](auto unit) {
    using U = decltype(unit);
    const int64_t units = row_bytes / static_cast<int64_t>(sizeof(U));
    move_rows_kernel<U, kScatter>
        <<<blocks_for(n * units), kThreads, 0, s>>>(static_cast<const U*>(x), idx, static_cast<U*>(out), n, units);
  };
  const auto align = reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out);
  if (row_bytes % 16 == 0 && align % 16 == 0)
    go(uint4{});
  else if (row_bytes % 4 == 0 && align % 4 == 0)
    go(uint32_t{});
  else if (row_bytes % 2 == 0)
    go(uint16_t{});
  else
    go(uint8_t{});
  return cudaGetLastError();
}

}  // namespace

cudaError_t gather_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  return move_rows<false>(x, idx, out, n, row_bytes, s);
}

cudaError_t scatter_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s) {
  return move_rows<true>(x, idx, out, n, row_bytes, s);
}

namespace {

template <typename T>
__global__ void unpatchify3d_kernel(const T* y, T* out, int64_t tt, int64_t h, int64_t w, int64_t C, int64_t pt,
                                    int64_t r, int64_t n) {
  const int64_t To = tt * pt, Ho = h * r, Wo = w * r, P = C * pt * r * r;
  H3_GRID_LOOP(idx, n) {
    const int64_t wo = idx % Wo, ho = (idx / Wo) % Ho, to = (idx / (Wo * Ho)) % To, c = idx / (Wo * Ho * To);
    const int64_t v = ((to / pt) * h + ho / r) * w + wo / r;
    out[idx] = y[v * P + ((c * pt + to % pt) * r + ho % r) * r + wo % r];
  }
}

}  // namespace

cudaError_t unpatchify3d(const void* y, void* out, ElemType t, int64_t tt, int64_t h, int64_t w, int64_t C, int64_t pt,
                         int64_t r, cudaStream_t s) {
  const int64_t n = C * tt * pt * h * r * w * r;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    unpatchify3d_kernel<T>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(y), static_cast<T*>(out), tt, h, w, C, pt, r, n);
  });
}

namespace {

// The tile holding output coordinate p along one axis (tiles that keep nothing are stepped over).
__device__ int stitch_tile(const int32_t* off, int n, int p) {
  int i = 0;
  while (i + 1 < n && p >= off[i + 1]) ++i;
  return i;
}

// S(tiles, f, c, Y, X) of ops/layout.h: tile value, then the blend with the raw tile above, then with the raw tile to
// the left; every product and sum rounded on its own (the CPU's order and roundings).
__device__ float stitch_spatial(const float* const* tiles, const StitchArgs& a, int tf, int f, int c, int ta, int tb,
                                int y, int x) {
  auto at = [&](int i, int j, int yy, int xx) {
    const int64_t h = a.row_size[i], w = a.col_size[j];
    return tiles[i * a.cols + j][((static_cast<int64_t>(c) * tf + f) * h + yy) * w + xx];
  };
  float v = at(ta, tb, y, x);
  const int er = a.row_extent[ta];
  if (ta > 0 && y < er) {
    const float wb = __fdiv_rn(static_cast<float>(y), static_cast<float>(er)), wa = __fsub_rn(1.0f, wb);
    v = __fadd_rn(__fmul_rn(at(ta - 1, tb, a.row_size[ta - 1] - er + y, x), wa), __fmul_rn(v, wb));
  }
  const int ec = a.col_extent[tb];
  if (tb > 0 && x < ec) {
    const float wb = __fdiv_rn(static_cast<float>(x), static_cast<float>(ec)), wa = __fsub_rn(1.0f, wb);
    v = __fadd_rn(__fmul_rn(at(ta, tb - 1, y, a.col_size[tb - 1] - ec + x), wa), __fmul_rn(v, wb));
  }
  return v;
}

// grid.y = output frame k, grid.x over C * H * W of that frame.
__global__ void stitch_frames_kernel(const StitchArgs a, float* out) {
  const int k = blockIdx.y;
  const int64_t plane = static_cast<int64_t>(a.height) * a.width, n = plane * a.channels;
  for (int64_t idx = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; idx < n;
       idx += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int c = static_cast<int>(idx / plane), Y = static_cast<int>((idx / a.width) % a.height),
              X = static_cast<int>(idx % a.width);
    const int ta = stitch_tile(a.row_off, a.rows, Y), tb = stitch_tile(a.col_off, a.cols, X);
    const int y = Y - a.row_off[ta], x = X - a.col_off[tb];
    float v = stitch_spatial(a.cur, a, a.cur_frames, a.frame[k], c, ta, tb, y, x);
    if (a.fade_e[k] > 0) {
      const float wb = __fdiv_rn(static_cast<float>(a.fade_p[k]), static_cast<float>(a.fade_e[k]));
      const float wa = __fsub_rn(1.0f, wb);
      const float p = stitch_spatial(a.prev, a, a.prev_frames, a.prev_frame[k], c, ta, tb, y, x);
      v = __fadd_rn(__fmul_rn(p, wa), __fmul_rn(v, wb));
    }
    out[(static_cast<int64_t>(c) * a.n_frames + k) * plane + static_cast<int64_t>(Y) * a.width + X] = v;
  }
}

}  // namespace

cudaError_t stitch_frames(const StitchArgs& a, float* out, cudaStream_t s) {
  if (a.n_frames <= 0 || a.height <= 0 || a.width <= 0 || a.channels <= 0) return cudaSuccess;
  if (a.n_frames > kStitchMaxFrames || a.rows > kStitchMaxAxis || a.cols > kStitchMaxAxis) return cudaErrorInvalidValue;
  const int64_t n = static_cast<int64_t>(a.height) * a.width * a.channels;
  const int64_t b = (n + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(b < 4096 ? b : 4096), static_cast<unsigned>(a.n_frames));
  stitch_frames_kernel<<<grid, kThreads, 0, s>>>(a, out);
  return cudaGetLastError();
}

}  // namespace h3::cuda

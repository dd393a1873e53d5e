// Kernels of the VAE decoders' ops (declared in backend/cuda/vae_kernels.h). Built with --fmad=false like the other
// kernels, so a*b+c rounds twice as on the CPU backend.
#include <cuda_bf16.h>

#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/vae_kernels.h"

namespace h3::cuda {

namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(b < 65535 * 32 ? (b > 0 ? b : 1) : 65535 * 32);
}

#define H3_GRID_LOOP(i, n)                                                               \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// One block per row.
template <typename T>
__global__ void layer_norm_kernel(const T* x, const T* w, const T* b, T* y, int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t base = blockIdx.x * cols;
  float s = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += ld(x, base + c);
  const float mean = block_sum(s, scratch) / static_cast<float>(cols);
  float q = 0.f;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    const float d = ld(x, base + c) - mean;
    q += d * d;
  }
  const float inv = 1.0f / sqrtf(block_sum(q, scratch) / static_cast<float>(cols) + eps);
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
    float v = (ld(x, base + c) - mean) * inv;
    if (w) v = v * ld(w, c);
    if (b) v = v + ld(b, c);
    st(y, base + c, v);
  }
}

template <typename T>
__global__ void conv1d_direct_kernel(const T* x, const T* w, const T* bias, T* y, int64_t C, int64_t L, int64_t O,
                                     int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t dil, int64_t groups,
                                     int64_t n) {
  const int64_t cpg = C / groups, opg = O / groups;
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, bo = idx / Lo, o = bo % O, b = bo / O, g = o / opg;
    float acc = 0.f;
    for (int64_t cl = 0; cl < cpg; ++cl) {
      const T* row = x + (b * C + g * cpg + cl) * L;
      const T* wr = w + (o * cpg + cl) * K;
      for (int64_t k = 0; k < K; ++k) {
        const int64_t i = j * stride + k * dil - pad;
        if (i >= 0 && i < L) acc += ld(wr, k) * ld(row, i);
      }
    }
    if (bias) acc += ld(bias, o);
    st(y, idx, acc);
  }
}

template <typename T>
__global__ void im2col_kernel(const T* x, T* cols, int64_t C, int64_t L, int64_t K, int64_t Lo, int64_t stride,
                              int64_t pad, int64_t dil, int64_t n) {
  const int64_t CK = C * K;
  H3_GRID_LOOP(idx, n) {
    const int64_t row = idx / CK, ck = idx % CK, c = ck / K, k = ck % K, b = row / Lo, j = row % Lo;
    const int64_t i = j * stride + k * dil - pad;
    cols[idx] = (i >= 0 && i < L) ? x[(b * C + c) * L + i] : T(0.f);
  }
}

template <typename T>
__global__ void rows_to_channels_kernel(const T* rows, T* y, int64_t O, int64_t Lo, int64_t n) {
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, o = (idx / Lo) % O, b = idx / (Lo * O);
    y[idx] = rows[(b * Lo + j) * O + o];
  }
}

template <typename T>
__global__ void conv_transpose1d_kernel(const T* x, const T* w, const T* bias, T* y, int64_t C, int64_t L, int64_t O,
                                        int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t groups, int64_t n) {
  const int64_t cpg = C / groups, opg = O / groups;
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, bo = idx / Lo, o = bo % O, b = bo / O, g = o / opg, ol = o % opg;
    // Output j takes input i through tap k when i*stride + k - pad = j: k = (j + pad) mod stride, + stride, ...
    const int64_t k0 = (j + pad) % stride;
    float acc = 0.f;
    for (int64_t cl = 0; cl < cpg; ++cl) {
      const int64_t c = g * cpg + cl;
      const T* row = x + (b * C + c) * L;
      const T* wr = w + (c * opg + ol) * K;
      for (int64_t k = k0; k < K; k += stride) {
        const int64_t i = (j + pad - k) / stride;
        if (j + pad - k >= 0 && i < L) acc += ld(wr, k) * ld(row, i);
      }
    }
    if (bias) acc += ld(bias, o);
    st(y, idx, acc);
  }
}

__device__ __forceinline__ int64_t pad_index(int64_t p, int64_t n, int mode) {
  if (p >= 0 && p < n) return p;
  if (mode == 0) return -1;
  if (mode == 2) return p < 0 ? 0 : n - 1;
  return p < 0 ? -p : 2 * (n - 1) - p;
}

template <typename T>
__global__ void pad1d_kernel(const T* x, T* y, int64_t L, int64_t left, int64_t Lo, int mode, int64_t n) {
  H3_GRID_LOOP(idx, n) {
    const int64_t j = idx % Lo, r = idx / Lo;
    const int64_t sj = pad_index(j - left, L, mode);
    y[idx] = sj < 0 ? T(0.f) : x[r * L + sj];
  }
}

template <typename TX, typename TY>
__global__ void add_scaled_kernel(const TX* x, const TY* y, const TX* scale, TX* out, int64_t cols, int64_t n) {
  H3_GRID_LOOP(idx, n) st(out, idx, ld(x, idx) + ld(y, idx) * ld(scale, idx % cols));
}

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

template <typename T>
__global__ void snake_beta_kernel(const T* x, const T* alpha, const T* beta, T* y, int64_t C, int64_t L, float gain,
                                  int64_t n) {
  H3_GRID_LOOP(idx, n) {
    const int64_t c = (idx / L) % C;
    const float fa = expf(ld(alpha, c));
    const float inv_b = 1.0f / (expf(ld(beta, c)) + 1e-9f);
    const float u = gain * ld(x, idx);
    const float s = sinf(fa * u);
    st(y, idx, u + inv_b * (s * s));
  }
}

template <typename T>
__global__ void divide_clamp_kernel(const T* x, T* y, float d, float lo, float hi, int64_t n) {
  H3_GRID_LOOP(idx, n) st(y, idx, fminf(hi, fmaxf(lo, ld(x, idx) / d)));
}

}  // namespace

cudaError_t layer_norm(const void* x, const void* w, const void* b, void* y, ElemType t, int64_t rows, int64_t cols,
                       float eps, cudaStream_t s) {
  if (rows == 0 || cols == 0) return cudaSuccess;
  const int threads = cols >= 1024 ? 1024 : static_cast<int>((cols + 31) / 32 * 32);
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    layer_norm_kernel<T><<<static_cast<unsigned>(rows), threads, 0, s>>>(
        static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(b), static_cast<T*>(y), cols, eps);
  });
}

cudaError_t conv1d_direct(const void* x, const void* w, const void* bias, void* y, ElemType t, int64_t B, int64_t C,
                          int64_t L, int64_t O, int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t dilation,
                          int64_t groups, cudaStream_t s) {
  const int64_t n = B * O * Lo;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    conv1d_direct_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                               static_cast<const T*>(bias), static_cast<T*>(y), C, L, O,
                                                               K, Lo, stride, pad, dilation, groups, n);
  });
}

cudaError_t conv1d_im2col(const void* x, void* cols, ElemType t, int64_t B, int64_t C, int64_t L, int64_t K, int64_t Lo,
                          int64_t stride, int64_t pad, int64_t dilation, cudaStream_t s) {
  const int64_t n = B * Lo * C * K;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    im2col_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(cols), C, L, K, Lo,
                                                        stride, pad, dilation, n);
  });
}

cudaError_t rows_to_channels(const void* rows, void* y, ElemType t, int64_t B, int64_t O, int64_t Lo, cudaStream_t s) {
  const int64_t n = B * O * Lo;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    rows_to_channels_kernel<T>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(rows), static_cast<T*>(y), O, Lo, n);
  });
}

cudaError_t conv_transpose1d(const void* x, const void* w, const void* bias, void* y, ElemType t, int64_t B, int64_t C,
                             int64_t L, int64_t O, int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t groups,
                             cudaStream_t s) {
  const int64_t n = B * O * Lo;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    conv_transpose1d_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(w),
                                                                  static_cast<const T*>(bias), static_cast<T*>(y), C, L,
                                                                  O, K, Lo, stride, pad, groups, n);
  });
}

cudaError_t pad1d(const void* x, void* y, ElemType t, int64_t rows, int64_t L, int64_t left, int64_t right, int mode,
                  cudaStream_t s) {
  const int64_t Lo = L + left + right, n = rows * Lo;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    pad1d_kernel<T>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), L, left, Lo, mode, n);
  });
}

cudaError_t add_scaled(const void* x, const void* y, const void* scale, void* out, ElemType tx, ElemType ty,
                       int64_t rows, int64_t cols, cudaStream_t s) {
  const int64_t n = rows * cols;
  if (n == 0) return cudaSuccess;
  using B = __nv_bfloat16;
  if (tx == ElemType::f32 && ty == ElemType::f32)
    add_scaled_kernel<float, float>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<const float*>(y),
                                            static_cast<const float*>(scale), static_cast<float*>(out), cols, n);
  else if (tx == ElemType::f32 && ty == ElemType::bf16)
    add_scaled_kernel<float, B>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const float*>(x), static_cast<const B*>(y),
                                            static_cast<const float*>(scale), static_cast<float*>(out), cols, n);
  else if (tx == ElemType::bf16 && ty == ElemType::bf16)
    add_scaled_kernel<B, B><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(y),
                                                               static_cast<const B*>(scale), static_cast<B*>(out), cols,
                                                               n);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

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

cudaError_t snake_beta(const void* x, const void* alpha, const void* beta, void* y, ElemType t, int64_t B, int64_t C,
                       int64_t L, float gain, cudaStream_t s) {
  const int64_t n = B * C * L;
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    snake_beta_kernel<T><<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(alpha),
                                                            static_cast<const T*>(beta), static_cast<T*>(y), C, L, gain,
                                                            n);
  });
}

cudaError_t divide_clamp(const void* x, void* y, ElemType t, int64_t n, float divisor, float lo, float hi,
                         cudaStream_t s) {
  if (n == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    divide_clamp_kernel<T>
        <<<blocks_for(n), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<T*>(y), divisor, lo, hi, n);
  });
}

namespace {

// The tile holding output coordinate p along one axis (tiles that keep nothing are stepped over).
__device__ int stitch_tile(const int32_t* off, int n, int p) {
  int i = 0;
  while (i + 1 < n && p >= off[i + 1]) ++i;
  return i;
}

// S(tiles, f, c, Y, X) of ops_vae.h: tile value, then the blend with the raw tile above, then with the raw tile to
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

namespace {

// norm.cu's rms_norm_kernel with a bf16 store: one block per (row, group), threads stride over the group.
__global__ void rms_norm_f32_to_bf16_kernel(const float* x, const float* w, __nv_bfloat16* y, int64_t cols,
                                            int64_t group, float eps) {
  const int64_t base = row_group_base(cols, group);
  __shared__ float partial[32];
  const float inv = block_rms_inverse(x, base, group, eps, partial);
  for (int64_t c = threadIdx.x; c < group; c += blockDim.x) {
    const float v = x[base + c] * inv;
    y[base + c] = __float2bfloat16_rn(w ? v * w[c] : v);
  }
}

// add_scaled_kernel's sum and rms_norm_f32_to_bf16_kernel's norm of it in one pass: the same expressions, the same
// per-thread column order and the same reduction, the sum kept in registers (kResidualNormMaxPer values a thread)
// instead of re-read, so both outputs are bitwise those of the two kernels.
template <typename TY>
__global__ void add_scaled_rms_norm_kernel(const float* x, const TY* y, const float* scale, float* sum, const float* w,
                                           __nv_bfloat16* out, int64_t cols, int64_t group, float eps) {
  const int64_t g = blockIdx.x % (cols / group), base = row_group_base(cols, group);
  float v[kResidualNormMaxPer];
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kResidualNormMaxPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (c < group) {
      const int64_t idx = base + c;
      const float a = ld(x, idx) + ld(y, idx) * ld(scale, g * group + c);  // = scale[idx % cols]
      st(sum, idx, a);
      v[i] = a;
      ss += a * a;
    }
  }
  __shared__ float partial[32];
  const float inv = 1.0f / sqrtf(block_sum(ss, partial) / static_cast<float>(group) + eps);
#pragma unroll
  for (int i = 0; i < kResidualNormMaxPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    if (c < group) {
      const float t = v[i] * inv;
      out[base + c] = __float2bfloat16_rn(w ? t * w[c] : t);
    }
  }
}

// Whole-row f32 norms (group == cols, cols % 4 == 0, 16-byte aligned): a row per block, 4 floats (16 bytes) per
// access, every load issued before the row's sum of squares. With kAdd the row is first x + y * scale (the
// residual update, stored to `sum`). The separate norm and the fused residual + norm share this kernel, so their
// reductions (and results) are bitwise the same.
template <int VPT, typename TY, bool kAdd>
__global__ void __launch_bounds__(256)
    f32_row_norm_kernel(const float* __restrict__ x, const TY* __restrict__ y, const float* __restrict__ scale,
                        float* __restrict__ sum, const float* __restrict__ w, __nv_bfloat16* __restrict__ out,
                        int64_t cols, float eps) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, chunks = cols / 4, base = row * cols;
  float v[VPT][4];
  bool live[VPT];
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    live[k] = c < chunks;
    if (!live[k]) continue;
    const float4 a = *reinterpret_cast<const float4*>(x + base + c * 4);
    v[k][0] = a.x, v[k][1] = a.y, v[k][2] = a.z, v[k][3] = a.w;
    if constexpr (kAdd) {
      float yv[4];
      if constexpr (sizeof(TY) == 4) {
        const float4 b = *reinterpret_cast<const float4*>(reinterpret_cast<const float*>(y) + base + c * 4);
        yv[0] = b.x, yv[1] = b.y, yv[2] = b.z, yv[3] = b.w;
      } else {
        const uint2 raw = *reinterpret_cast<const uint2*>(reinterpret_cast<const __nv_bfloat16*>(y) + base + c * 4);
        const __nv_bfloat162* h = reinterpret_cast<const __nv_bfloat162*>(&raw);
        const float2 p0 = __bfloat1622float2(h[0]), p1 = __bfloat1622float2(h[1]);
        yv[0] = p0.x, yv[1] = p0.y, yv[2] = p1.x, yv[3] = p1.y;
      }
      const float4 sc = *reinterpret_cast<const float4*>(scale + c * 4);
      const float scv[4] = {sc.x, sc.y, sc.z, sc.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) v[k][j] = v[k][j] + yv[j] * scv[j];
      *reinterpret_cast<float4*>(sum + base + c * 4) = make_float4(v[k][0], v[k][1], v[k][2], v[k][3]);
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int k = 0; k < VPT; ++k)
    if (live[k])
#pragma unroll
      for (int j = 0; j < 4; ++j) ss += v[k][j] * v[k][j];
  const float inv = 1.0f / sqrtf(block_sum(ss, scratch) / static_cast<float>(cols) + eps);
#pragma unroll
  for (int k = 0; k < VPT; ++k) {
    if (!live[k]) continue;
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * blockDim.x;
    float o[4];
    if (w) {
      const float4 wv = *reinterpret_cast<const float4*>(w + c * 4);
      const float ww[4] = {wv.x, wv.y, wv.z, wv.w};
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = (v[k][j] * inv) * ww[j];
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) o[j] = v[k][j] * inv;
    }
    uint2 raw;
    __nv_bfloat162* h = reinterpret_cast<__nv_bfloat162*>(&raw);
    h[0] = __floats2bfloat162_rn(o[0], o[1]);
    h[1] = __floats2bfloat162_rn(o[2], o[3]);
    *reinterpret_cast<uint2*>(out + base + c * 4) = raw;
  }
}

// Launches f32_row_norm_kernel when the row fits (at most 8 chunks of 4 a thread, 256 threads); false otherwise.
template <typename TY, bool kAdd>
bool f32_row_norm(const float* x, const TY* y, const float* scale, float* sum, const float* w, __nv_bfloat16* out,
                  int64_t rows, int64_t cols, int64_t group, float eps, cudaStream_t s) {
  if (group != cols || cols % 4) return false;
  for (const void* p : std::initializer_list<const void*>{x, y, scale, sum, w, out})
    if (reinterpret_cast<uintptr_t>(p) % 16) return false;
  const int64_t chunks = cols / 4;
  const int vpt = static_cast<int>((chunks + 255) / 256);
  if (vpt < 1 || vpt > 8) return false;
  const int threads = static_cast<int>(((chunks + vpt - 1) / vpt + 31) / 32 * 32);
  const unsigned blocks = static_cast<unsigned>(rows);
  switch (vpt) {
#define H3_ROW_NORM_CASE(V)                                                                           \
  case V:                                                                                             \
    f32_row_norm_kernel<V, TY, kAdd><<<blocks, threads, 0, s>>>(x, y, scale, sum, w, out, cols, eps); \
    break;
    H3_ROW_NORM_CASE(1)
    H3_ROW_NORM_CASE(2)
    H3_ROW_NORM_CASE(3)
    H3_ROW_NORM_CASE(4)
    H3_ROW_NORM_CASE(5)
    H3_ROW_NORM_CASE(6)
    H3_ROW_NORM_CASE(7)
    H3_ROW_NORM_CASE(8)
#undef H3_ROW_NORM_CASE
  }
  return true;
}

}  // namespace

cudaError_t rms_norm_f32_to_bf16(const float* x, const float* w, void* y, int64_t rows, int64_t cols, int64_t group,
                                 float eps, cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  if (f32_row_norm<float, false>(x, nullptr, nullptr, nullptr, w, static_cast<__nv_bfloat16*>(y), rows, cols, group,
                                 eps, s))
    return cudaGetLastError();
  const int64_t blocks = rows * (cols / group);
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  rms_norm_f32_to_bf16_kernel<<<static_cast<unsigned>(blocks), threads, 0, s>>>(x, w, static_cast<__nv_bfloat16*>(y),
                                                                                cols, group, eps);
  return cudaGetLastError();
}

cudaError_t add_scaled_rms_norm_to_bf16(const float* x, const void* y, ElemType ty, const float* scale, float* sum,
                                        const float* w, void* out, int64_t rows, int64_t cols, int64_t group, float eps,
                                        cudaStream_t s) {
  if (rows == 0) return cudaSuccess;
  const int threads = group >= 1024 ? 1024 : static_cast<int>((group + 31) / 32 * 32);
  if (group <= 0 || cols % group != 0 || group > static_cast<int64_t>(threads) * kResidualNormMaxPer)
    return cudaErrorInvalidValue;
  const unsigned blocks = static_cast<unsigned>(rows * (cols / group));
  auto* o = static_cast<__nv_bfloat16*>(out);
  if (ty == ElemType::f32 &&
      f32_row_norm<float, true>(x, static_cast<const float*>(y), scale, sum, w, o, rows, cols, group, eps, s))
    return cudaGetLastError();
  if (ty == ElemType::bf16 && f32_row_norm<__nv_bfloat16, true>(x, static_cast<const __nv_bfloat16*>(y), scale, sum, w,
                                                                o, rows, cols, group, eps, s))
    return cudaGetLastError();
  if (ty == ElemType::f32)
    add_scaled_rms_norm_kernel<float>
        <<<blocks, threads, 0, s>>>(x, static_cast<const float*>(y), scale, sum, w, o, cols, group, eps);
  else if (ty == ElemType::bf16)
    add_scaled_rms_norm_kernel<__nv_bfloat16>
        <<<blocks, threads, 0, s>>>(x, static_cast<const __nv_bfloat16*>(y), scale, sum, w, o, cols, group, eps);
  else
    return cudaErrorInvalidValue;
  return cudaGetLastError();
}

}  // namespace h3::cuda

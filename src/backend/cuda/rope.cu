// Rotate-half RoPE and the q/k head norm + RoPE (backend/cuda/rope.h): the generic f32/bf16 kernels and the bf16
// kernels for heads of 64 and 128 channels. Built with --fmad=false, so that a*b+c rounds
// twice, as on the CPU backend.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cfloat>
#include <cstdint>
#include <initializer_list>

#include "backend/cuda/device.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope.h"
#include "backend/cuda/row.cuh"

namespace h3::cuda {

namespace {

template <typename T>
__global__ void rope_kernel(const T* x, const T* cs, const T* sn, T* out, int64_t rows, int64_t cols, int64_t rot,
                            int64_t d, bool bf) {
  const int64_t n = rows * cols, half = rot / 2;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols, j = c % d, head0 = i - j;
    if (j >= rot) {
      st(out, i, ld(x, i));
      continue;
    }
    const float xv = ld(x, i);
    const float other = j < half ? -ld(x, head0 + j + half) : ld(x, head0 + j - half);
    const float cv = ld(cs, r * rot + j), sv = ld(sn, r * rot + j);
    st(out, i, bf ? rb(rb(xv * cv) + rb(other * sv)) : xv * cv + other * sv);
  }
}

// One warp per (row, head): the head's d values in shared memory, norm, then rotate-half RoPE on the first rot.
template <typename T>
__global__ void qk_norm_rope_kernel(const T* x, const T* w, const T* cs, const T* sn, T* out, int64_t rows,
                                    int64_t heads, int64_t d, int64_t rot, float eps, bool bf) {
  extern __shared__ float head_vals[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t item = blockIdx.x * int64_t(blockDim.x / 32) + warp;
  if (item >= rows * heads) return;
  const int64_t row = item / heads, base = item * d, half = rot / 2;
  float* v = head_vals + warp * d;
  float ss = 0.f;
  for (int64_t c = lane; c < d; c += 32) {
    const float a = ld(x, base + c);
    v[c] = a;
    ss += a * a;
  }
  const float inv = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(d) + eps);
  for (int64_t c = lane; c < d; c += 32) v[c] = round_to<T>((v[c] * inv) * ld(w, c));
  __syncwarp();
  for (int64_t c = lane; c < d; c += 32) {
    if (c >= rot) {
      st(out, base + c, v[c]);
      continue;
    }
    const float other = c < half ? -v[c + half] : v[c - half];
    const float cv = ld(cs, row * rot + c), sv = ld(sn, row * rot + c);
    st(out, base + c, bf ? rb(rb(v[c] * cv) + rb(other * sv)) : v[c] * cv + other * sv);
  }
}

// qk_norm_rope for bf16 heads of 128 channels: half a warp per head, each lane owning 8 consecutive channels
// (16-byte accesses); the rotate-half partners come through shared memory.
__global__ void qk_norm_rope_d128(const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* cs,
                                  const __nv_bfloat16* sn, __nv_bfloat16* out, int64_t rows, int64_t heads, int64_t rot,
                                  float eps, bool bf) {
  __shared__ float vals[8][128];
  const int half_warp = threadIdx.x >> 4, lane = threadIdx.x & 15;
  const int64_t item = blockIdx.x * int64_t(blockDim.x / 16) + half_warp;
  const bool active = item < rows * heads;
  const int64_t row = active ? item / heads : 0, base = item * 128, half = rot / 2;
  float* v = vals[half_warp];
  const int c0 = lane * 8;
  Bf8 a{};
  if (active) a = load8(x + base + c0);
  const Bf8 wv = load8(w + c0);  // independent of x: in flight together
  float ss = 0.f;
  for (int j = 0; j < 8; ++j) ss += a.v[j] * a.v[j];
  for (int o = 8; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);  // within the half warp
  const float inv = 1.0f / sqrtf(ss / 128.0f + eps);
  for (int j = 0; j < 8; ++j) {
    a.v[j] = rb((a.v[j] * inv) * wv.v[j]);
    v[c0 + j] = a.v[j];
  }
  __syncwarp();
  if (!active) return;
  Bf8 o;
  for (int j = 0; j < 8; ++j) {
    const int64_t c = c0 + j;
    if (c >= rot) {
      o.v[j] = a.v[j];
      continue;
    }
    const float other = c < half ? -v[c + half] : v[c - half];
    const float cv = __bfloat162float(cs[row * rot + c]), sv = __bfloat162float(sn[row * rot + c]);
    o.v[j] = bf ? rb(rb(a.v[j] * cv) + rb(other * sv)) : a.v[j] * cv + other * sv;
  }
  store8(out + base + c0, o);
}

// q/k norm + RoPE for bf16 heads of kD = 64 or 128 channels: kD/8 lanes per (row, head) item, 8 channels per lane,
// kQkItems items per lane group; the sum of squares per lane, then across the group's lanes (butterfly). The
// rotate-half partner of channel c (c < rot) is c +- rot/2, i.e. lane +- rot/16 of the same group: exchanged by
// shuffles (rot % 16 == 0). The DiT's heads are 128 wide, the video VAE decoder's 64. With bf16 steps the normalized
// values travel and rotate as bf16 pairs (bf16x8_*: the f32-then-round bits in a quarter of the instructions); when
// the heads of a row come in whole groups (heads % kQkItems == 0, the DiT's 56), a group loads its row's cos / sin
// once, before its items.
//
// A persistent grid (kQkBlocksPerSm blocks an SM): each lane group takes the groups of items g, g + stride, ... and
// loads the next one's items (and cos / sin) before it works on the current one, so that a group's loads are in
// flight while the previous group computes (docs/notes.md, "2026-12-06 (rooms)"); one-shot blocks (four an SM) left the
// memory idle between waves.
constexpr int kQkItems = 4;

constexpr int kQkBlocksPerSm = 3;  // 80 registers with the prefetched group: three blocks an SM (four spilled, slower)

// bf (bf16 steps), fp8 (e4m3 output, else bf16) and row_per_group (heads % kQkItems == 0) are template parameters:
// each build holds one path, with fewer registers (the general one spilled, and ran slower than the old kernel).
template <int kD, bool bf, bool fp8, bool row_per_group>
__global__ void __launch_bounds__(256, kQkBlocksPerSm)
    qk_norm_rope_vec_kernel(const __nv_bfloat16* __restrict__ x, const __nv_bfloat16* __restrict__ w,
                            const __nv_bfloat16* __restrict__ cs, const __nv_bfloat16* __restrict__ sn,
                            __nv_bfloat16* __restrict__ out, __nv_fp8_e4m3* __restrict__ out8,
                            const float* __restrict__ scale8, int64_t items, int heads, int rot, float eps) {
  constexpr int kLanes = kD / 8;
  const int lane = threadIdx.x & (kLanes - 1), c0 = lane * 8, half = rot / 2, shift_lanes = half / 8;
  const int64_t groups = (items + kQkItems - 1) / kQkItems;
  const int64_t stride = int64_t(gridDim.x) * blockDim.x / kLanes;  // lane groups in the grid
  const int64_t sub = (threadIdx.x & 31) / kLanes;                  // this lane group within its warp
  float wv[8];
  unpack(load_raw(w + c0), wv);
  const bool rotates = c0 < rot;
  const bool lower = c0 < half;  // takes -partner * sin
  const int partner = (threadIdx.x & 31) + (lower ? shift_lanes : -shift_lanes);
  const float scale = fp8 ? *scale8 : 1.f;
  // The row of a group's first item: one division (32-bit where the items allow: a 64-bit one is a long subroutine).
  auto row_of = [&](int64_t first) {
    return items <= 0xffffffffll ? int64_t(uint32_t(first) / uint32_t(heads)) : first / heads;
  };
  // Issues group gg's loads (nothing past the end).
  auto load = [&](int64_t gg, uint4(&raw)[kQkItems], uint4& c, uint4& s) {
    const int64_t first = gg * kQkItems;
#pragma unroll
    for (int k = 0; k < kQkItems; ++k)
      if (gg < groups && first + k < items) raw[k] = load_raw(x + (first + k) * kD + c0);
    if (row_per_group && rotates && gg < groups) {  // (row_per_group: a constant)
      const int64_t row = row_of(first);
      c = load_raw(cs + row * rot + c0);
      s = load_raw(sn + row * rot + c0);
    }
  };
  int64_t g = (blockIdx.x * int64_t(blockDim.x) + threadIdx.x) / kLanes;
  uint4 raw[kQkItems], cs_raw{}, sn_raw{};
  load(g, raw, cs_raw, sn_raw);
  // Whole warps run the loop together (the shuffles): a lane group past the end works on zeros and stores nothing.
  for (int64_t gw = g - sub; gw < groups; gw += stride, g += stride) {
    uint4 next[kQkItems], next_cs{}, next_sn{};
    load(g + stride, next, next_cs, next_sn);
    const int64_t first = g * kQkItems;
    // The row of each item, counted on from the group's first (needed only for cos / sin loaded per item).
    int64_t row = row_per_group ? 0 : row_of(first);
    int rem = row_per_group ? 0 : static_cast<int>(first - row * heads);
#pragma unroll
    for (int k = 0; k < kQkItems; ++k) {
      const int64_t item = first + k;
      const bool active = g < groups && item < items;  // uniform over the lane group
      if (!row_per_group && k > 0 && ++rem == heads) {
        rem = 0;
        ++row;
      }
      float v[8];
      if (active)
        unpack(raw[k], v);
      else
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = 0.f;
      float ss = 0.f;
#pragma unroll
      for (int j = 0; j < 8; ++j) ss = fmaf(v[j], v[j], ss);
      for (int o = kLanes / 2; o > 0; o >>= 1) ss += __shfl_xor_sync(0xffffffffu, ss, o);  // within the group
      const float inv = 1.0f / sqrtf(ss / static_cast<float>(kD) + eps);
#pragma unroll
      for (int j = 0; j < 8; ++j) v[j] = (v[j] * inv) * wv[j];
      const uint4 n = pack(v);  // rb(n)
      if constexpr (bf) {
        uint4 other;
        other.x = __shfl_sync(0xffffffffu, n.x, rotates ? partner : (threadIdx.x & 31));
        other.y = __shfl_sync(0xffffffffu, n.y, rotates ? partner : (threadIdx.x & 31));
        other.z = __shfl_sync(0xffffffffu, n.z, rotates ? partner : (threadIdx.x & 31));
        other.w = __shfl_sync(0xffffffffu, n.w, rotates ? partner : (threadIdx.x & 31));
        if (!active) continue;
        uint4 o = n;
        if (rotates) {
          if constexpr (!row_per_group) {
            cs_raw = load_raw(cs + row * rot + c0);
            sn_raw = load_raw(sn + row * rot + c0);
          }
          // rb(rb(n cos) + rb(+-partner sin))
          o = bf16x8_add(bf16x8_mul(n, cs_raw), bf16x8_mul(lower ? bf16x8_neg(other) : other, sn_raw));
        }
        if constexpr (fp8) {
          unpack(o, v);  // the bf16 value the unquantized path would store
          store_fp8x8(out8 + item * kD + c0, v, scale);
        } else {
          *reinterpret_cast<uint4*>(out + item * kD + c0) = o;
        }
        continue;
      }
      unpack(n, v);
      float other[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) other[j] = __shfl_sync(0xffffffffu, v[j], rotates ? partner : (threadIdx.x & 31));
      if (!active) continue;
      if (rotates) {
        float cv[8], sv[8];
        unpack(row_per_group ? cs_raw : load_raw(cs + row * rot + c0), cv);
        unpack(row_per_group ? sn_raw : load_raw(sn + row * rot + c0), sv);
#pragma unroll
        for (int j = 0; j < 8; ++j) {
          const float o = lower ? -other[j] : other[j];
          v[j] = v[j] * cv[j] + o * sv[j];
        }
      }
      if constexpr (fp8) {
#pragma unroll
        for (int j = 0; j < 8; ++j) v[j] = rb(v[j]);  // the bf16 value the unquantized path would store
        store_fp8x8(out8 + item * kD + c0, v, scale);
      } else {
        *reinterpret_cast<uint4*>(out + item * kD + c0) = pack(v);
      }
    }
#pragma unroll
    for (int k = 0; k < kQkItems; ++k) raw[k] = next[k];
    cs_raw = next_cs;
    sn_raw = next_sn;
  }
}

}  // namespace

cudaError_t rope(const void* x, const void* cs, const void* sn, void* out, ElemType t, int64_t rows, int64_t cols,
                 int64_t rot, int64_t d, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    rope_kernel<T><<<blocks_for(rows * cols), kThreads, 0, s>>>(static_cast<const T*>(x), static_cast<const T*>(cs),
                                                                static_cast<const T*>(sn), static_cast<T*>(out), rows,
                                                                cols, rot, d, bf);
  });
}

cudaError_t qk_norm_rope(const void* x, const void* w, const void* cs, const void* sn, void* out, ElemType t,
                         int64_t rows, int64_t cols, int64_t d, int64_t rot, float eps, bool bf, cudaStream_t s) {
  if (rows * cols == 0) return cudaSuccess;
  if (d > 1024 || cols % d) return cudaErrorInvalidValue;
  const int64_t items = rows * (cols / d);
  constexpr int kWarps = 4;
  if (t == ElemType::bf16 && d == 128 && aligned16({x, w, out})) {
    using B = __nv_bfloat16;
    constexpr int kHeadsPerBlock = 8;
    qk_norm_rope_d128<<<static_cast<unsigned>((items + kHeadsPerBlock - 1) / kHeadsPerBlock), 16 * kHeadsPerBlock, 0,
                        s>>>(static_cast<const B*>(x), static_cast<const B*>(w), static_cast<const B*>(cs),
                             static_cast<const B*>(sn), static_cast<B*>(out), rows, cols / d, rot, eps, bf);
    return cudaGetLastError();
  }
  return by_type(t, [&](auto tag) {
    using T = decltype(tag);
    qk_norm_rope_kernel<T>
        <<<static_cast<unsigned>((items + kWarps - 1) / kWarps), 32 * kWarps, kWarps * d * sizeof(float), s>>>(
            static_cast<const T*>(x), static_cast<const T*>(w), static_cast<const T*>(cs), static_cast<const T*>(sn),
            static_cast<T*>(out), rows, cols / d, d, rot, eps, bf);
  });
}

namespace {

// The current device's SM count for the persistent grids (asked on every launch: cheap, and right for any device),
// or 0 when the runtime cannot say (the caller then launches every block it needs: any grid gives the same result).
int multiprocessors() {
  int dev = 0, n = 0;
  if (cudaGetDevice(&dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&n, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) {
    (void)cudaGetLastError();  // not left for the launch's own check to report
    return 0;
  }
  return n;
}

template <int kD>
cudaError_t qk_norm_rope_vec(const void* x, const void* w, const void* cs, const void* sn, void* out, void* out_fp8,
                             const float* fp8_scale, int64_t rows, int64_t heads, int64_t rot, float eps,
                             bool bf16_steps, cudaStream_t s) {
  if (rows * heads == 0) return cudaSuccess;
  if (rot % 16 || rot > kD || rot <= 0 || (out_fp8 && !fp8_scale) || (!out && !out_fp8)) return cudaErrorNotSupported;
  for (const void* p : std::initializer_list<const void*>{x, w, cs, sn, out, out_fp8})
    if (!aligned16(p)) return cudaErrorNotSupported;
  const int64_t items = rows * heads;
  constexpr int threads = 256;
  const int64_t groups = (items + kQkItems - 1) / kQkItems;  // kD / 8 lanes each
  const int64_t needed = (groups * (kD / 8) + threads - 1) / threads;
  const int sms = multiprocessors();
  const unsigned blocks =
      static_cast<unsigned>(sms > 0 ? std::min<int64_t>(needed, int64_t(sms) * kQkBlocksPerSm) : needed);
  using B = __nv_bfloat16;
  using Kernel =
      void (*)(const B*, const B*, const B*, const B*, B*, __nv_fp8_e4m3*, const float*, int64_t, int, int, float);
  // [bf16 steps][fp8 out][whole groups of heads a row]
  static constexpr Kernel kernels[2][2][2] = {
      {{qk_norm_rope_vec_kernel<kD, false, false, false>, qk_norm_rope_vec_kernel<kD, false, false, true>},
       {qk_norm_rope_vec_kernel<kD, false, true, false>, qk_norm_rope_vec_kernel<kD, false, true, true>}},
      {{qk_norm_rope_vec_kernel<kD, true, false, false>, qk_norm_rope_vec_kernel<kD, true, false, true>},
       {qk_norm_rope_vec_kernel<kD, true, true, false>, qk_norm_rope_vec_kernel<kD, true, true, true>}}};
  const Kernel kernel = kernels[bf16_steps][out_fp8 != nullptr][heads % kQkItems == 0];
  kernel<<<blocks, threads, 0, s>>>(static_cast<const B*>(x), static_cast<const B*>(w), static_cast<const B*>(cs),
                                    static_cast<const B*>(sn), static_cast<B*>(out),
                                    static_cast<__nv_fp8_e4m3*>(out_fp8), fp8_scale, items, static_cast<int>(heads),
                                    static_cast<int>(rot), eps);
  return cudaGetLastError();
}

}  // namespace

cudaError_t qk_norm_rope_d128(const void* x, const void* w, const void* cs, const void* sn, void* out, void* out_fp8,
                              const float* fp8_scale, int64_t rows, int64_t heads, int64_t rot, float eps,
                              bool bf16_steps, cudaStream_t s) {
  return qk_norm_rope_vec<128>(x, w, cs, sn, out, out_fp8, fp8_scale, rows, heads, rot, eps, bf16_steps, s);
}

cudaError_t qk_norm_rope_d64(const void* x, const void* w, const void* cs, const void* sn, void* out, int64_t rows,
                             int64_t heads, int64_t rot, float eps, bool bf16_steps, cudaStream_t s) {
  return qk_norm_rope_vec<64>(x, w, cs, sn, out, nullptr, nullptr, rows, heads, rot, eps, bf16_steps, s);
}

}  // namespace h3::cuda

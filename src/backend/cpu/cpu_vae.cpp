// CPU reference implementations of ops_vae.h in f32 and f64 (the arithmetic the VAE decoders always did, moved
// here so the GPU backend can stand in for it).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_checks.h"
#include "core/parallel.h"
#include "ops/device_ops.h"
#include "ops/ops_vae.h"

namespace h3::ops {

namespace {

using cpu_checks::need_float;
using cpu_checks::same_dtype;

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

}  // namespace

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  H3_DEVICE_DISPATCH(x, add_scaled, x, y, scale);
  need_float(x, "add_scaled", "x");
  same_dtype(x, y, "add_scaled");
  same_dtype(x, scale, "add_scaled");
  H3_ASSERT(x.ndim() == 2 && y.shape() == x.shape() && scale.numel() == x.dim(1), "add_scaled: x {} y {} scale {}",
            x.describe(), y.describe(), scale.describe());
  Tensor out(x.dtype(), x.shape());
  const int64_t N = x.dim(0), C = x.dim(1);
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* sp = scale.data<T>();
    T* op = out.data<T>();
    parallel_for(N, [&](int64_t rb, int64_t re) {
      for (int64_t r = rb; r < re; ++r)
        for (int64_t c = 0; c < C; ++c) op[r * C + c] = xp[r * C + c] + yp[r * C + c] * sp[c];
    }, 16);
    return 0;
  });
  return out;
}

Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t C, int64_t pt, int64_t r) {
  H3_DEVICE_DISPATCH(y, unpatchify3d, y, t, h, w, C, pt, r);
  need_float(y, "unpatchify3d", "y");
  const int64_t V = t * h * w, P = C * pt * r * r;
  H3_ASSERT(y.ndim() == 2 && y.dim(0) == V && y.dim(1) == P, "unpatchify3d: y {} for {}x{}x{} tokens of {} values",
            y.describe(), t, h, w, P);
  const int64_t To = t * pt, Ho = h * r, Wo = w * r;
  Tensor out(y.dtype(), {C, To, Ho, Wo});
  dispatch(out, [&]<typename T>(T) {
    const T* yp = y.data<T>();
    T* op = out.data<T>();
    parallel_for(V, [&](int64_t vb, int64_t ve) {
      for (int64_t v = vb; v < ve; ++v) {
        const int64_t ti = v / (h * w), yi = (v / w) % h, xi = v % w;
        const T* row = yp + v * P;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t a = 0; a < pt; ++a)
            for (int64_t b = 0; b < r; ++b)
              for (int64_t e = 0; e < r; ++e)
                op[((c * To + ti * pt + a) * Ho + yi * r + b) * Wo + xi * r + e] = row[((c * pt + a) * r + b) * r + e];
      }
    }, 64);
    return 0;
  });
  return out;
}

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
  H3_DEVICE_DISPATCH(x, snake_beta, x, alpha, beta, gain);
  need_float(x, "snake_beta", "x");
  same_dtype(x, alpha, "snake_beta");
  same_dtype(x, beta, "snake_beta");
  H3_ASSERT(x.ndim() == 3 && alpha.numel() == x.dim(1) && beta.numel() == x.dim(1), "snake_beta: x {} alpha {} beta {}",
            x.describe(), alpha.describe(), beta.describe());
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2);
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T>(T) {
    std::vector<T> fa(C), inv_b(C);
    for (int64_t c = 0; c < C; ++c) {
      fa[c] = std::exp(alpha.data<T>()[c]);
      inv_b[c] = T(1) / (std::exp(beta.data<T>()[c]) + T(1e-9));
    }
    const T g = T(gain);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(B * C, [&](int64_t rb, int64_t re) {
      for (int64_t row = rb; row < re; ++row) {
        const int64_t c = row % C;
        for (int64_t j = 0; j < L; ++j) {
          const T u = g * xp[row * L + j];
          const T s = std::sin(fa[c] * u);
          yp[row * L + j] = u + inv_b[c] * (s * s);
        }
      }
    });
    return 0;
  });
  return y;
}

Tensor slice_last(const Tensor& x, int64_t begin, int64_t end) {
  H3_DEVICE_DISPATCH(x, slice_last, x, begin, end);
  need_float(x, "slice_last", "x");
  const int64_t L = x.dim(-1), rows = L ? x.numel() / L : 0;
  H3_ASSERT(0 <= begin && begin <= end && end <= L, "slice_last: [{}, {}) of {}", begin, end, x.describe());
  Shape s = x.shape();
  s.back() = end - begin;
  Tensor y(x.dtype(), s);
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(y.raw());
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * (end - begin) * es, src + (r * L + begin) * es, (end - begin) * es);
  return y;
}

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
  H3_DEVICE_DISPATCH(x, divide_clamp, x, divisor, lo, hi);
  need_float(x, "divide_clamp", "x");
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T d = T(divisor), l = T(lo), h = T(hi);
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = std::min(h, std::max(l, xp[i] / d));
    return 0;
  });
  return y;
}

namespace {

constexpr int kMaxLanes = 16;
using Lanes = std::array<float, kMaxLanes>;

// ATen's utils::CeilLog2 (1 for x <= 2).
int64_t ceil_log2(int64_t x) {
  if (x <= 2) return 1;
  int64_t bits = 0;
  for (uint64_t v = static_cast<uint64_t>(x) - 1; v; v >>= 1) ++bits;
  return bits;
}

// ATen's multi_row_sum over `size` items of four interleaved rows: item (i, k) is the `lanes` floats at
// x + (i * 4 + k) * lanes. Four cascade levels of accumulators; level j - 1 is folded into level j after
// every 2^p items while the item count's bits above level j - 1 are zero.
std::array<Lanes, 4> multi_row_sum(const float* x, int64_t size, int lanes) {
  constexpr int levels = 4, rows = 4;
  const int64_t power = std::max<int64_t>(4, ceil_log2(size) / levels), step = int64_t{1} << power,
                mask = step - 1;
  std::array<std::array<Lanes, rows>, levels> acc{};
  auto add_item = [&](Lanes& a, int64_t i, int64_t k) {
    const float* p = x + (i * rows + k) * lanes;
    for (int l = 0; l < lanes; ++l) a[l] += p[l];
  };
  int64_t i = 0;
  while (i + step <= size) {
    for (int64_t j = 0; j < step; ++j, ++i)
      for (int k = 0; k < rows; ++k) add_item(acc[0][k], i, k);
    for (int j = 1; j < levels; ++j) {
      for (int k = 0; k < rows; ++k) {
        for (int l = 0; l < lanes; ++l) acc[j][k][l] += acc[j - 1][k][l];
        acc[j - 1][k].fill(0.0f);
      }
      if ((i & (mask << (j * power))) != 0) break;
    }
  }
  for (; i < size; ++i)
    for (int k = 0; k < rows; ++k) add_item(acc[0][k], i, k);
  for (int j = 1; j < levels; ++j)
    for (int k = 0; k < rows; ++k)
      for (int l = 0; l < lanes; ++l) acc[0][k][l] += acc[j][k][l];
  return acc[0];
}

// ATen's row_sum over `size` items of `lanes` floats: four interleaved partial sums, the leftover items into
// the first, then the first += the other three.
Lanes row_sum(const float* x, int64_t size, int lanes) {
  const int64_t size_ilp = size / 4;
  std::array<Lanes, 4> part = multi_row_sum(x, size_ilp, lanes);
  for (int64_t i = size_ilp * 4; i < size; ++i)
    for (int l = 0; l < lanes; ++l) part[0][l] += x[i * lanes + l];
  for (int k = 1; k < 4; ++k)
    for (int l = 0; l < lanes; ++l) part[0][l] += part[k][l];
  return part[0];
}

}  // namespace

float torch_cpu_sum_f32(const float* x, int64_t n, int lanes) {
  H3_ASSERT(lanes >= 1 && lanes <= kMaxLanes && n >= 0, "torch_cpu_sum_f32: {} elements, {} lanes (1..{})", n,
            lanes, kMaxLanes);
  if (n < lanes) return row_sum(x, n, 1)[0];  // ATen's scalar inner sum
  const int64_t vecs = n / lanes;
  const Lanes v = row_sum(x, vecs, lanes);
  float total = 0.0f;
  for (int64_t k = vecs * lanes; k < n; ++k) total += x[k];
  for (int l = 0; l < lanes; ++l) total += v[l];
  return total;
}

Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps) {
  H3_ASSERT(x.device() == Device::cpu && x.dtype() == DType::f64,
            "rms_norm_via_f32: x must be an f64 host tensor, got {}", x.describe());
  const int64_t cols = x.ndim() ? x.dim(-1) : 1, rows = cols ? x.numel() / cols : 0;
  H3_ASSERT(group > 0 && cols % group == 0, "rms_norm_via_f32: group {} does not divide {}", group, cols);
  if (w)
    H3_ASSERT(w->dtype() == DType::f64 && w->numel() == group, "rms_norm_via_f32: weight {} for group {}",
              w->describe(), group);
  Tensor y(DType::f64, x.shape());
  const double* xp = x.data<double>();
  const double* wp = w ? w->data<double>() : nullptr;
  double* yp = y.data<double>();
  const float eps32 = static_cast<float>(eps), n32 = static_cast<float>(group);
  parallel_for(
      rows,
      [&](int64_t rb, int64_t re) {
        std::vector<float> xf(static_cast<size_t>(group)), sq(static_cast<size_t>(group));
        for (int64_t r = rb; r < re; ++r)
          for (int64_t g = 0; g < cols; g += group) {
            const double* in = xp + r * cols + g;
            double* out = yp + r * cols + g;
            for (int64_t c = 0; c < group; ++c) {
              xf[c] = static_cast<float>(in[c]);
              sq[c] = xf[c] * xf[c];
            }
            const float mean = torch_cpu_sum_f32(sq.data(), group, kReferenceSumLanes) / n32;
            const float inv = 1.0f / std::sqrt(mean + eps32);
            for (int64_t c = 0; c < group; ++c) {
              const float v = xf[c] * inv;
              // With a weight: the f32 product times the f64 weight in f64, cast back to f32 (the input's
              // dtype).
              out[c] = wp ? static_cast<double>(static_cast<float>(static_cast<double>(v) * wp[c]))
                          : static_cast<double>(v);
            }
          }
      },
      16);
  return y;
}

}  // namespace h3::ops

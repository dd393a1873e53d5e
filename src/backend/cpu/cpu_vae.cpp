// CPU reference implementations of ops_vae.h in f32 and f64 (the arithmetic the VAE decoders always did, moved
// here so the GPU backend can stand in for it).
#include <algorithm>
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

}  // namespace h3::ops

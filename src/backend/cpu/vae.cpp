// CPU reference implementations of ops_vae.h in f32 and f64 (entries of the CPU backend's table; the front door has
// checked shapes and dtypes).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/parallel.h"

namespace h3::cpu {

namespace {

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

}  // namespace

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  Tensor out(x.dtype(), x.shape());
  const int64_t N = x.dim(0), C = x.dim(1);
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* sp = scale.data<T>();
    T* op = out.data<T>();
    parallel_for(
        N,
        [&](int64_t rb, int64_t re) {
          for (int64_t r = rb; r < re; ++r)
            for (int64_t c = 0; c < C; ++c) op[r * C + c] = xp[r * C + c] + yp[r * C + c] * sp[c];
        },
        16);
    return 0;
  });
  return out;
}

Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t C, int64_t pt, int64_t r) {
  const int64_t V = t * h * w, P = C * pt * r * r;
  const int64_t To = t * pt, Ho = h * r, Wo = w * r;
  Tensor out(y.dtype(), {C, To, Ho, Wo});
  dispatch(out, [&]<typename T>(T) {
    const T* yp = y.data<T>();
    T* op = out.data<T>();
    parallel_for(
        V,
        [&](int64_t vb, int64_t ve) {
          for (int64_t v = vb; v < ve; ++v) {
            const int64_t ti = v / (h * w), yi = (v / w) % h, xi = v % w;
            const T* row = yp + v * P;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t a = 0; a < pt; ++a)
                for (int64_t b = 0; b < r; ++b)
                  for (int64_t e = 0; e < r; ++e)
                    op[((c * To + ti * pt + a) * Ho + yi * r + b) * Wo + xi * r + e] =
                        row[((c * pt + a) * r + b) * r + e];
          }
        },
        64);
    return 0;
  });
  return out;
}

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
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
  const int64_t L = x.dim(-1), rows = L ? x.numel() / L : 0;
  Shape s = x.shape();
  s.back() = end - begin;
  Tensor y(x.dtype(), s);
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(y.raw());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * (end - begin) * es, src + (r * L + begin) * es, (end - begin) * es);
  return y;
}

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
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

Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps, RefNormWeight weight) {
  const int64_t cols = x.ndim() ? x.dim(-1) : 1, rows = cols ? x.numel() / cols : 0;
  Tensor y(DType::f64, x.shape());
  const double* xp = x.data<double>();
  const double* wp = w ? w->data<double>() : nullptr;
  double* yp = y.data<double>();
  const float eps32 = static_cast<float>(eps), n32 = static_cast<float>(group);
  const bool back_to_f32 = weight == RefNormWeight::kWeightThenF32;
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
            const float mean = ops::torch_cpu_sum_f32(sq.data(), group, ops::kReferenceSumLanes) / n32;
            const float inv = 1.0f / std::sqrt(mean + eps32);
            for (int64_t c = 0; c < group; ++c) {
              const float v = xf[c] * inv;
              // With a weight: the f32 product times the f64 weight in f64, then (ATen's composite) cast back
              // to f32, the input's dtype, or (transformers' Qwen3 norm) kept in f64.
              if (!wp)
                out[c] = static_cast<double>(v);
              else if (back_to_f32)
                out[c] = static_cast<double>(static_cast<float>(static_cast<double>(v) * wp[c]));
              else
                out[c] = wp[c] * static_cast<double>(v);
            }
          }
      },
      16);
  return y;
}

Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  Tensor y = rms_norm(x, w, group, eps);
  return y.dtype() == out ? y : y.to(out);
}

std::pair<Tensor, Tensor> add_scaled_norm_to(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                             int64_t group, double eps, DType out) {
  Tensor sum = add_scaled(x, y, scale);
  Tensor normed = rms_norm_to(sum, w, group, eps, out);
  return {std::move(sum), std::move(normed)};
}

Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks) {
  const int64_t n = q.dim(0) / blocks;
  if (blocks == 1) return attention(q, k, v, head_dim);
  Tensor out(q.dtype(), q.shape());
  for (int64_t b = 0; b < blocks; ++b) {
    const Tensor o =
        attention(q.rows(b * n, (b + 1) * n), k.rows(b * n, (b + 1) * n), v.rows(b * n, (b + 1) * n), head_dim);
    std::memcpy(out.rows(b * n, (b + 1) * n).raw(), o.raw(), o.nbytes());
  }
  return out;
}

namespace {
// The tile index along one axis holding output coordinate p (kept extents are never all zero before it).
int64_t find_tile(const StitchAxis& a, int64_t p) {
  int64_t i = 0;
  while (i + 1 < static_cast<int64_t>(a.kept.size()) && p >= a.off[i + 1]) ++i;
  return i;
}
}  // namespace

Tensor stitch_frames(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const StitchGrid& g,
                     const std::vector<StitchFrame>& frames, const StitchLayout& l, const StitchLayout& lp) {
  const int64_t C = l.channels, H = l.rows.off.back(), W = l.cols.off.back(), F = static_cast<int64_t>(frames.size());
  Tensor out(cur[0].dtype(), {C, F, H, W});
  dispatch(out, [&]<typename T>(T) {
    T* op = out.data<T>();
    // S(tiles, f, c, Y, X) of the header's equations; every output element is computed alone from its inputs.
    auto spatial = [&](const std::vector<Tensor>& tiles, int64_t tf, int64_t f, int64_t c, int64_t a, int64_t b,
                       int64_t y, int64_t x) {
      const int64_t cols = g.cols;
      auto at = [&](int64_t ta, int64_t tb, int64_t yy, int64_t xx) {
        const int64_t h = l.rows.size[ta], w = l.cols.size[tb];
        return tiles[ta * cols + tb].template data<T>()[((c * tf + f) * h + yy) * w + xx];
      };
      T v = at(a, b, y, x);
      const int64_t er = l.rows.extent[a];
      if (a > 0 && y < er) {
        const T wb = T(static_cast<double>(y)) / T(static_cast<double>(er)), wa = T(1) - wb;
        v = at(a - 1, b, l.rows.size[a - 1] - er + y, x) * wa + v * wb;
      }
      const int64_t ec = l.cols.extent[b];
      if (b > 0 && x < ec) {
        const T wb = T(static_cast<double>(x)) / T(static_cast<double>(ec)), wa = T(1) - wb;
        v = at(a, b - 1, y, l.cols.size[b - 1] - ec + x) * wa + v * wb;
      }
      return v;
    };
    parallel_for(
        C * F * H,
        [&](int64_t r0, int64_t r1) {
          for (int64_t r = r0; r < r1; ++r) {
            const int64_t c = r / (F * H), k = (r / H) % F, Y = r % H;
            const StitchFrame& fr = frames[k];
            const int64_t a = find_tile(l.rows, Y), y = Y - l.rows.off[a];
            T* row = op + r * W;
            for (int64_t X = 0; X < W; ++X) {
              const int64_t b = find_tile(l.cols, X), x = X - l.cols.off[b];
              T v = spatial(cur, l.tile_frames, fr.frame, c, a, b, y, x);
              if (fr.fade_e > 0) {
                const T wb = T(static_cast<double>(fr.fade_p)) / T(static_cast<double>(fr.fade_e)), wa = T(1) - wb;
                v = spatial(prev, lp.tile_frames, fr.prev_frame, c, a, b, y, x) * wa + v * wb;
              }
              row[X] = v;
            }
          }
        },
        4);
    return 0;
  });
  return out;
}

}  // namespace h3::cpu

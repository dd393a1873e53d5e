// CPU reference implementations of ops_conv.h in f32 and f64 (entries of the CPU backend's table; the front door
// has checked shapes and dtypes). Each task owns whole output rows/planes and adds its terms in one fixed order, so
// the result is independent of the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/parallel.h"

namespace h3::cpu {

namespace {

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

// A layer's data as T: input, weight and bias (null when absent), output.
template <typename T>
struct Data {
  const T* x;
  const T* w;
  const T* b;
  T* y;
};
template <typename T>
Data<T> data_of(const Tensor& x, const Tensor* w, const Tensor* b, Tensor& y) {
  return {x.data<T>(), w ? w->data<T>() : nullptr, b ? b->data<T>() : nullptr, y.data<T>()};
}

// Source index of padded position p in [-pad, n + pad) for a dimension of size n; -1 means "zero".
inline int64_t pad_index(int64_t p, int64_t n, PadMode mode) {
  if (p >= 0 && p < n) return p;
  switch (mode) {
    case PadMode::zeros:
      return -1;
    case PadMode::replicate:
      return p < 0 ? 0 : n - 1;
    case PadMode::reflect:
      return p < 0 ? -p : 2 * (n - 1) - p;
  }
  return -1;
}

}  // namespace

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, std::array<int64_t, 3> stride) {
  const int64_t C = x.dim(0), T = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t O = w.dim(0), kt = w.dim(2), kh = w.dim(3), kw = w.dim(4);
  const auto [st, sh, sw] = stride;
  const int64_t To = (T - kt) / st + 1, Ho = (H - kh) / sh + 1, Wo = (W - kw) / sw + 1;
  Tensor y(x.dtype(), {O, To, Ho, Wo});
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, &w, bias, y);
    // One task = one output plane (o, t); terms are added in (c, a, b, e) order for every pixel.
    parallel_for(O * To, [&](int64_t tb, int64_t te) {
      for (int64_t task = tb; task < te; ++task) {
        const int64_t o = task / To, t = task % To;
        T_* plane = yp + task * Ho * Wo;
        std::fill(plane, plane + Ho * Wo, T_(0));
        for (int64_t c = 0; c < C; ++c)
          for (int64_t a = 0; a < kt; ++a) {
            const T_* xf = xp + (c * T + t * st + a) * H * W;
            for (int64_t b = 0; b < kh; ++b)
              for (int64_t e = 0; e < kw; ++e) {
                const T_ wv = wp[(((o * C + c) * kt + a) * kh + b) * kw + e];
                for (int64_t ho = 0; ho < Ho; ++ho) {
                  const T_* row = xf + (ho * sh + b) * W + e;
                  T_* out = plane + ho * Wo;
                  if (sw == 1)
                    for (int64_t wo = 0; wo < Wo; ++wo) out[wo] += wv * row[wo];
                  else
                    for (int64_t wo = 0; wo < Wo; ++wo) out[wo] += wv * row[wo * sw];
                }
              }
          }
        if (bp)
          for (int64_t i = 0; i < Ho * Wo; ++i) plane[i] += bp[o];
      }
    });
    return 0;
  });
  return y;
}

Tensor pad3d(const Tensor& x, int64_t t_front, int64_t top, int64_t bottom, int64_t left, int64_t right, PadMode mode) {
  const int64_t C = x.dim(0), T = x.dim(1), H = x.dim(2), W = x.dim(3);
  const int64_t To = T + t_front, Ho = H + top + bottom, Wo = W + left + right;
  Tensor y(x.dtype(), {C, To, Ho, Wo});
  dispatch(x, [&]<typename T_>(T_) {
    const T_* xp = x.data<T_>();
    T_* yp = y.data<T_>();
    parallel_for(C * T, [&](int64_t tb, int64_t te) {
      for (int64_t task = tb; task < te; ++task) {
        const int64_t c = task / T, t = task % T;
        const T_* src = xp + task * H * W;
        T_* dst = yp + (c * To + t + t_front) * Ho * Wo;
        for (int64_t i = 0; i < Ho; ++i) {
          const int64_t si = pad_index(i - top, H, mode);
          for (int64_t j = 0; j < Wo; ++j) {
            const int64_t sj = pad_index(j - left, W, mode);
            dst[i * Wo + j] = (si < 0 || sj < 0) ? T_(0) : src[si * W + sj];
          }
        }
      }
    });
    return 0;
  });
  return y;
}

Tensor group_norm_frames(const Tensor& x, int64_t groups, const Tensor* w, const Tensor* b, double eps) {
  const int64_t C = x.dim(0), T = x.dim(1), S = x.numel() / std::max<int64_t>(C * T, 1);
  if (w) H3_ASSERT(w->numel() == C, "group_norm_frames: weight {} for {} channels", w->describe(), C);
  if (b) H3_ASSERT(b->numel() == C, "group_norm_frames: bias {} for {} channels", b->describe(), C);
  const int64_t cg = C / groups;
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, w, b, y);
    parallel_for(groups * T, [&](int64_t tb, int64_t te) {
      for (int64_t task = tb; task < te; ++task) {
        const int64_t g = task / T, t = task % T;
        const double n = static_cast<double>(cg * S);
        T_ sum = 0;
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const T_* p = xp + (c * T + t) * S;
          for (int64_t s = 0; s < S; ++s) sum += p[s];
        }
        const T_ mean = sum / T_(n);
        T_ var = 0;
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const T_* p = xp + (c * T + t) * S;
          for (int64_t s = 0; s < S; ++s) var += (p[s] - mean) * (p[s] - mean);
        }
        const T_ inv = T_(1) / std::sqrt(var / T_(n) + T_(eps));
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const T_* p = xp + (c * T + t) * S;
          T_* q = yp + (c * T + t) * S;
          const T_ sc = wp ? wp[c] : T_(1), sh = bp ? bp[c] : T_(0);
          for (int64_t s = 0; s < S; ++s) q[s] = (p[s] - mean) * inv * sc + sh;
        }
      }
    });
    return 0;
  });
  return y;
}

Tensor layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps) {
  const int64_t C = x.dim(-1), N = x.numel() / std::max<int64_t>(C, 1);
  if (w) H3_ASSERT(w->numel() == C, "layer_norm: weight {} for width {}", w->describe(), C);
  if (b) H3_ASSERT(b->numel() == C, "layer_norm: bias {} for width {}", b->describe(), C);
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, w, b, y);
    parallel_for(
        N,
        [&](int64_t rb, int64_t re) {
          for (int64_t r = rb; r < re; ++r) {
            const T_* p = xp + r * C;
            T_* q = yp + r * C;
            T_ sum = 0;
            for (int64_t c = 0; c < C; ++c) sum += p[c];
            const T_ mean = sum / T_(C);
            T_ var = 0;
            for (int64_t c = 0; c < C; ++c) var += (p[c] - mean) * (p[c] - mean);
            const T_ inv = T_(1) / std::sqrt(var / T_(C) + T_(eps));
            for (int64_t c = 0; c < C; ++c) {
              T_ v = (p[c] - mean) * inv;
              if (wp) v *= wp[c];
              if (bp) v += bp[c];
              q[c] = v;
            }
          }
        },
        16);
    return 0;
  });
  return y;
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t dilation,
              int64_t groups) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), O = w.dim(0), K = w.dim(2);
  const int64_t span = (K - 1) * dilation + 1;
  const int64_t Lo = (L + 2 * pad - span) / stride + 1;
  if (bias) H3_ASSERT(bias->numel() == O, "conv1d: bias {} for {} outputs", bias->describe(), O);
  const int64_t cpg = C / groups, opg = O / groups;
  Tensor y(x.dtype(), {B, O, Lo});
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, &w, bias, y);
    parallel_for(B * O, [&](int64_t tb, int64_t te) {
      for (int64_t task = tb; task < te; ++task) {
        const int64_t bi = task / O, o = task % O, g = o / opg;
        T_* out = yp + task * Lo;
        std::fill(out, out + Lo, T_(0));
        for (int64_t cl = 0; cl < cpg; ++cl) {
          const T_* row = xp + (bi * C + g * cpg + cl) * L;
          for (int64_t k = 0; k < K; ++k) {
            const T_ wv = wp[(o * cpg + cl) * K + k];
            const int64_t off = k * dilation - pad;  // input index = j*stride + off
            // Valid j: 0 <= j*stride + off < L.
            int64_t j0 = off >= 0 ? 0 : (-off + stride - 1) / stride;
            int64_t j1 = L - off <= 0 ? 0 : std::min(Lo, (L - off - 1) / stride + 1);
            if (stride == 1)
              for (int64_t j = j0; j < j1; ++j) out[j] += wv * row[j + off];
            else
              for (int64_t j = j0; j < j1; ++j) out[j] += wv * row[j * stride + off];
          }
        }
        if (bp)
          for (int64_t j = 0; j < Lo; ++j) out[j] += bp[o];
      }
    });
    return 0;
  });
  return y;
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad,
                        int64_t groups) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), opg = w.dim(1), K = w.dim(2);
  const int64_t O = opg * groups, cpg = C / groups;
  const int64_t Lo = (L - 1) * stride - 2 * pad + K;
  if (bias) H3_ASSERT(bias->numel() == O, "conv_transpose1d: bias {} for {} outputs", bias->describe(), O);
  Tensor y(x.dtype(), {B, O, Lo});
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, &w, bias, y);
    parallel_for(B * O, [&](int64_t tb, int64_t te) {
      for (int64_t task = tb; task < te; ++task) {
        const int64_t bi = task / O, o = task % O, g = o / opg, ol = o % opg;
        T_* out = yp + task * Lo;
        std::fill(out, out + Lo, T_(0));
        for (int64_t cl = 0; cl < cpg; ++cl) {
          const int64_t c = g * cpg + cl;
          const T_* row = xp + (bi * C + c) * L;
          for (int64_t k = 0; k < K; ++k) {
            const T_ wv = wp[(c * opg + ol) * K + k];
            for (int64_t i = 0; i < L; ++i) {
              const int64_t j = i * stride + k - pad;
              if (j >= 0 && j < Lo) out[j] += wv * row[i];
            }
          }
        }
        if (bp)
          for (int64_t j = 0; j < Lo; ++j) out[j] += bp[o];
      }
    });
    return 0;
  });
  return y;
}

Tensor pad1d(const Tensor& x, int64_t left, int64_t right, PadMode mode) {
  const int64_t L = x.dim(-1), rows = x.numel() / std::max<int64_t>(L, 1), Lo = L + left + right;
  Shape s = x.shape();
  s.back() = Lo;
  Tensor y(x.dtype(), s);
  dispatch(x, [&]<typename T_>(T_) {
    const T_* xp = x.data<T_>();
    T_* yp = y.data<T_>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < Lo; ++j) {
        const int64_t sj = pad_index(j - left, L, mode);
        yp[r * Lo + j] = sj < 0 ? T_(0) : xp[r * L + sj];
      }
    return 0;
  });
  return y;
}

Tensor attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  const int64_t n = q.dim(0), qcols = q.dim(1), kcols = k.dim(1), heads = qcols / d, kv_heads = kcols / d;
  const int64_t group = heads / kv_heads;
  Tensor out(q.dtype(), {n, qcols});
  dispatch(q, [&]<typename T_>(T_) {
    const T_* qp = q.data<T_>();
    const T_* kp = k.data<T_>();
    const T_* vp = v.data<T_>();
    T_* op = out.data<T_>();
    const T_ scale = T_(1) / std::sqrt(T_(d));
    // One task = one (query head, query row): a two-pass softmax over keys 0..i of KV head h / group, in order.
    parallel_for(
        heads * n,
        [&](int64_t tb, int64_t te) {
          std::vector<T_> s(n), acc(d);
          for (int64_t task = tb; task < te; ++task) {
            const int64_t h = task / n, i = task % n, kvh = h / group;
            const T_* qi = qp + i * qcols + h * d;
            T_ m = -INFINITY;
            for (int64_t j = 0; j <= i; ++j) {
              const T_* kj = kp + j * kcols + kvh * d;
              T_ dot = 0;
              for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
              s[j] = dot * scale;
              m = std::max(m, s[j]);
            }
            T_ l = 0;
            std::fill(acc.begin(), acc.end(), T_(0));
            for (int64_t j = 0; j <= i; ++j) {
              const T_ p = std::exp(s[j] - m);
              l += p;
              const T_* vj = vp + j * kcols + kvh * d;
              for (int64_t c = 0; c < d; ++c) acc[c] += p * vj[c];
            }
            T_* oi = op + i * qcols + h * d;
            for (int64_t c = 0; c < d; ++c) oi[c] = acc[c] / l;
          }
        },
        8);
    return 0;
  });
  return out;
}

Tensor weight_norm(const Tensor& g, const Tensor& v) {
  const int64_t rows = v.dim(0), per = v.numel() / std::max<int64_t>(rows, 1);
  Tensor w(v.dtype(), v.shape());
  dispatch(v, [&]<typename T_>(T_) {
    const T_* gp = g.data<T_>();
    const T_* vp = v.data<T_>();
    T_* wp = w.data<T_>();
    for (int64_t r = 0; r < rows; ++r) {
      T_ ss = 0;
      for (int64_t i = 0; i < per; ++i) ss += vp[r * per + i] * vp[r * per + i];
      const T_ f = gp[r] / std::sqrt(ss);
      for (int64_t i = 0; i < per; ++i) wp[r * per + i] = vp[r * per + i] * f;
    }
    return 0;
  });
  return w;
}

}  // namespace h3::cpu

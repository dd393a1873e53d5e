// CPU reference entries of the convolution family (ops/conv.h) in f32 and f64: 3-D and 1-D convolutions, transposed
// 1-D convolutions and padding. Each task owns whole output rows/planes and adds its terms in one fixed order, so the
// result is independent of the thread count.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"
#include "core/parallel.h"

namespace h3::cpu {

namespace {

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

}  // namespace h3::cpu

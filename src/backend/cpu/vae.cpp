// CPU reference implementations of ops_vae.h in f32 and f64 (the arithmetic the VAE decoders always did, moved
// here so the GPU backend can stand in for it).
#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/checks.h"
#include "core/parallel.h"
#include "ops/device_ops.h"
#include "ops/ops.h"
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
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(dst + r * (end - begin) * es, src + (r * L + begin) * es, (end - begin) * es);
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
  const int64_t power = std::max<int64_t>(4, ceil_log2(size) / levels), step = int64_t{1} << power, mask = step - 1;
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
  H3_ASSERT(lanes >= 1 && lanes <= kMaxLanes && n >= 0, "torch_cpu_sum_f32: {} elements, {} lanes (1..{})", n, lanes,
            kMaxLanes);
  if (n < lanes) return row_sum(x, n, 1)[0];  // ATen's scalar inner sum
  const int64_t vecs = n / lanes;
  const Lanes v = row_sum(x, vecs, lanes);
  float total = 0.0f;
  for (int64_t k = vecs * lanes; k < n; ++k) total += x[k];
  for (int l = 0; l < lanes; ++l) total += v[l];
  return total;
}

Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps, RefNormWeight weight) {
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
            const float mean = torch_cpu_sum_f32(sq.data(), group, kReferenceSumLanes) / n32;
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

}  // namespace h3::ops

namespace h3::ops {

Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  H3_DEVICE_DISPATCH(x, rms_norm_to, x, w, group, eps, out);
  Tensor y = rms_norm(x, w, group, eps);
  return y.dtype() == out ? y : y.to(out);
}

std::pair<Tensor, Tensor> add_scaled_norm_to(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                             int64_t group, double eps, DType out) {
  H3_DEVICE_DISPATCH(x, add_scaled_norm_to, x, y, scale, w, group, eps, out);
  Tensor sum = add_scaled(x, y, scale);
  Tensor normed = rms_norm_to(sum, w, group, eps, out);
  return {std::move(sum), std::move(normed)};
}

Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks) {
  H3_DEVICE_DISPATCH(q, attention_blocks, q, k, v, head_dim, blocks);
  need_float(q, "attention_blocks", "q");
  H3_ASSERT(blocks > 0 && q.ndim() == 2 && k.shape() == q.shape() && v.shape() == q.shape() && q.dim(0) % blocks == 0,
            "attention_blocks: q {} k {} v {} in {} blocks", q.describe(), k.describe(), v.describe(), blocks);
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
StitchAxis stitch_axis(const std::vector<int64_t>& sizes, const std::vector<int64_t>& overlaps, const char* op,
                       const char* what) {
  const size_t n = sizes.size();
  H3_ASSERT(n > 0 && overlaps.size() + 1 == n, "{}: {} {} of tiles with {} overlaps", op, n, what, overlaps.size());
  StitchAxis a;
  a.size = sizes;
  a.off.push_back(0);
  for (size_t i = 0; i < n; ++i) {
    H3_ASSERT(i + 1 == n || overlaps[i] >= 0, "{}: negative overlap {} after {} {}", op, overlaps[i], what, i);
    // slice_dim(tile, 0, size - overlap) clamps: a tile smaller than its overlap keeps nothing.
    a.kept.push_back(i + 1 == n ? sizes[i] : std::max<int64_t>(sizes[i] - overlaps[i], 0));
    a.off.push_back(a.off.back() + a.kept.back());
    a.extent.push_back(i == 0 ? 0 : std::max<int64_t>(std::min({sizes[i - 1], sizes[i], overlaps[i - 1]}), 0));
  }
  return a;
}
}  // namespace

StitchLayout stitch_layout(const std::vector<Tensor>& tiles, const StitchGrid& g, const char* op) {
  H3_ASSERT(g.rows > 0 && g.cols > 0 && static_cast<int64_t>(tiles.size()) == g.rows * g.cols,
            "{}: {} tiles for a {} x {} grid", op, tiles.size(), g.rows, g.cols);
  const Tensor& t0 = tiles[0];
  H3_ASSERT(t0.ndim() == 4, "{}: tiles must be [C, T, h, w], got {}", op, t0.describe());
  std::vector<int64_t> heights(g.rows), widths(g.cols);
  for (int64_t a = 0; a < g.rows; ++a) heights[a] = tiles[a * g.cols].dim(2);
  for (int64_t b = 0; b < g.cols; ++b) widths[b] = tiles[b].dim(3);
  for (int64_t a = 0; a < g.rows; ++a)
    for (int64_t b = 0; b < g.cols; ++b) {
      const Tensor& t = tiles[a * g.cols + b];
      H3_ASSERT(t.ndim() == 4 && t.dtype() == t0.dtype() && t.device() == t0.device() && t.dim(0) == t0.dim(0) &&
                    t.dim(1) == t0.dim(1) && t.dim(2) == heights[a] && t.dim(3) == widths[b],
                "{}: tile ({}, {}) is {} but its row has height {}, its column width {} and tile (0, 0) is {}", op, a,
                b, t.describe(), heights[a], widths[b], t0.describe());
    }
  StitchLayout l;
  l.channels = t0.dim(0);
  l.tile_frames = t0.dim(1);
  l.rows = stitch_axis(heights, g.row_overlaps, op, "rows");
  l.cols = stitch_axis(widths, g.col_overlaps, op, "columns");
  return l;
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
                     const std::vector<StitchFrame>& frames) {
  H3_ASSERT(!cur.empty(), "stitch_frames: no tiles");
  H3_DEVICE_DISPATCH(cur[0], stitch_frames, cur, prev, g, frames);
  need_float(cur[0], "stitch_frames", "tiles");
  const StitchLayout l = stitch_layout(cur, g, "stitch_frames");
  bool fades = false;
  for (const auto& f : frames) {
    H3_ASSERT(f.frame >= 0 && f.frame < l.tile_frames && f.fade_e >= 0 && f.fade_p >= 0 &&
                  f.fade_p < std::max<int64_t>(f.fade_e, 1),
              "stitch_frames: frame {} (fade {}/{}) of tiles with {} frames", f.frame, f.fade_p, f.fade_e,
              l.tile_frames);
    fades = fades || f.fade_e > 0;
  }
  StitchLayout lp;
  if (fades) {
    lp = stitch_layout(prev, g, "stitch_frames (previous chunk)");
    H3_ASSERT(lp.rows.size == l.rows.size && lp.cols.size == l.cols.size && lp.channels == l.channels &&
                  prev[0].dtype() == cur[0].dtype(),
              "stitch_frames: the previous chunk's tiles ({}) do not match the current ones ({})", prev[0].describe(),
              cur[0].describe());
    for (const auto& f : frames)
      H3_ASSERT(f.fade_e == 0 || (f.prev_frame >= 0 && f.prev_frame < lp.tile_frames),
                "stitch_frames: previous frame {} of tiles with {} frames", f.prev_frame, lp.tile_frames);
  }
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

}  // namespace h3::ops

// CPU reference entries of the layout family (ops/layout.h): row gathers and scatters, column ranges and the last
// dim's ranges of host tensors (any dtype), and in f32 and f64 the ViT decoder's unpatchify and the video decode's
// stitch (every output element computed alone from its inputs).
#include <algorithm>
#include <cstring>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"
#include "core/parallel.h"

namespace h3::cpu {

namespace {

// The tile index along one axis holding output coordinate p (kept extents are never all zero before it).
int64_t find_tile(const StitchAxis& a, int64_t p) {
  int64_t i = 0;
  while (i + 1 < static_cast<int64_t>(a.kept.size()) && p >= a.off[i + 1]) ++i;
  return i;
}

}  // namespace

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t n = t.dim(0), c = t.dim(1), w = end - begin;
  Tensor out(t.dtype(), {n, w});
  const size_t es = dtype_size(t.dtype());
  const auto* in = static_cast<const std::byte*>(t.raw());
  auto* o = static_cast<std::byte*>(out.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + (r * c + begin) * es, w * es, o + r * w * es);
  return out;
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  const int64_t n = src.dim(0), c = dst.dim(1), w = src.dim(1);
  const size_t es = dtype_size(dst.dtype());
  const auto* in = static_cast<const std::byte*>(src.raw());
  auto* o = static_cast<std::byte*>(dst.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + r * w * es, w * es, o + (r * c + begin) * es);
}

void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx) {
  const int64_t n = rows.dim(0);
  const Shape out_tail(out.shape().begin() + 1, out.shape().end());
  const size_t row_bytes = static_cast<size_t>(shape_numel(out_tail)) * dtype_size(out.dtype());
  const int32_t* ip = idx.data<int32_t>();
  auto* o = static_cast<std::byte*>(out.raw());
  const auto* in = static_cast<const std::byte*>(rows.raw());
  for (int64_t i = 0; i < n; ++i) std::copy_n(in + i * row_bytes, row_bytes, o + ip[i] * row_bytes);
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  const int64_t n = idx.numel();
  Shape s = x.shape();
  s[0] = n;
  Tensor out(x.dtype(), s);
  const Shape tail(x.shape().begin() + 1, x.shape().end());
  const size_t row_bytes = static_cast<size_t>(shape_numel(tail)) * dtype_size(x.dtype());
  const int32_t* ip = idx.data<int32_t>();
  auto* o = static_cast<std::byte*>(out.raw());
  const auto* in = static_cast<const std::byte*>(x.raw());
  for (int64_t i = 0; i < n; ++i) std::copy_n(in + ip[i] * row_bytes, row_bytes, o + i * row_bytes);
  return out;
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

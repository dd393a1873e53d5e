// The front door of ops/layout.h: shapes and dtypes checked once (the stitch's tile grid resolved into its layout
// here), then the entry of the backend holding the first tensor (ops/backend_ops.h).
#include "ops/layout.h"

#include <algorithm>

#include "ops/checks.h"

namespace h3::ops {

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

void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx) {
  const BackendOps& be = backend_of(out, "scatter_rows");
  H3_ASSERT(out.ndim() >= 1 && rows.ndim() >= 1 && rows.dtype() == out.dtype() &&
                check::row_width(rows) == check::row_width(out),
            "scatter_rows: {} into {}", rows.describe(), out.describe());
  H3_ASSERT(rows.device() == out.device() || (be.converts_params && !rows.on_device()),
            "scatter_rows: rows {} on another device than out {}", rows.describe(), out.describe());
  check::index(be, idx, rows.dim(0), out.dim(0), "scatter_rows");
  H3_OP_CALL(be, scatter_rows, out, rows, idx);
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  const BackendOps& be = backend_of(x, "gather_rows");
  H3_ASSERT(x.ndim() >= 1, "gather_rows: needs at least 1-D, got {}", x.describe());
  check::index(be, idx, idx.numel(), x.dim(0), "gather_rows");
  return H3_OP_CALL(be, gather_rows, x, idx);
}

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const BackendOps& be = backend_of(t, "columns");
  H3_ASSERT(t.ndim() == 2 && 0 <= begin && begin <= end && end <= t.dim(1), "columns({}, {}) of {}", begin, end,
            t.describe());
  return H3_OP_CALL(be, columns, t, begin, end);
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  const BackendOps& be = backend_of(dst, "set_columns");
  H3_ASSERT(dst.ndim() == 2 && src.ndim() == 2 && dst.dim(0) == src.dim(0) && dst.dtype() == src.dtype() &&
                begin >= 0 && begin + src.dim(1) <= dst.dim(1),
            "set_columns({}) of {} into {}", begin, src.describe(), dst.describe());
  H3_ASSERT(src.device() == dst.device() || (be.converts_params && !src.on_device()),
            "set_columns: {} on another device than {}", src.describe(), dst.describe());
  H3_OP_CALL(be, set_columns, dst, begin, src);
}

Tensor slice_last(const Tensor& x, int64_t begin, int64_t end) {
  const BackendOps& be = backend_of(x, "slice_last");
  act(be, x, "slice_last", "x");
  const int64_t L = x.ndim() ? x.dim(-1) : 0;
  H3_ASSERT(0 <= begin && begin <= end && end <= L, "slice_last: [{}, {}) of {}", begin, end, x.describe());
  return H3_OP_CALL(be, slice_last, x, begin, end);
}

Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t C, int64_t pt, int64_t r) {
  const BackendOps& be = backend_of(y, "unpatchify3d");
  act(be, y, "unpatchify3d", "y");
  H3_ASSERT(t >= 0 && h >= 0 && w >= 0 && C >= 0 && pt >= 0 && r >= 0 && y.ndim() == 2 && y.dim(0) == t * h * w &&
                y.dim(1) == C * pt * r * r,
            "unpatchify3d: y {} for {}x{}x{} tokens of {} values", y.describe(), t, h, w, C * pt * r * r);
  return H3_OP_CALL(be, unpatchify3d, y, t, h, w, C, pt, r);
}

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

Tensor stitch_frames(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const StitchGrid& g,
                     const std::vector<StitchFrame>& frames) {
  H3_ASSERT(!cur.empty(), "stitch_frames: no tiles");
  const BackendOps& be = backend_of(cur[0], "stitch_frames");
  act(be, cur[0], "stitch_frames", "tiles");
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
                  prev[0].dtype() == cur[0].dtype() && prev[0].device() == cur[0].device(),
              "stitch_frames: the previous chunk's tiles ({}) do not match the current ones ({})", prev[0].describe(),
              cur[0].describe());
    for (const auto& f : frames)
      H3_ASSERT(f.fade_e == 0 || (f.prev_frame >= 0 && f.prev_frame < lp.tile_frames),
                "stitch_frames: previous frame {} of tiles with {} frames", f.prev_frame, lp.tile_frames);
  }
  return H3_OP_CALL(be, stitch_frames, cur, prev, g, frames, l, lp);
}

}  // namespace h3::ops

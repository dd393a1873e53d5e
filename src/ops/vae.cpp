// The front door of ops_vae.h: shapes and dtypes checked once (the stitch's tile grid resolved into its layout
// here), then the backend's entry.
#include <algorithm>

#include "ops/checks.h"
#include "ops/ops_vae.h"

namespace h3::ops {

using check::act;
using check::backend_of;
using check::param;
using check::same;

namespace {

// add_scaled's rules: x [N, C], y x's shape (and dtype, or bf16 on an f32 x where the backend converts parameters),
// scale [C].
void check_add_scaled(const BackendOps& be, const Tensor& x, const Tensor& y, const Tensor& scale, const char* op) {
  act(be, x, op, "x");
  if (be.converts_params && x.dtype() == DType::f32 && y.dtype() == DType::bf16)
    H3_ASSERT(y.device() == x.device(), "{}: y {} must sit with x {}", op, y.describe(), x.describe());
  else
    same(x, y, op, "y");
  param(be, x, scale, op, "scale");
  H3_ASSERT(x.ndim() == 2 && y.shape() == x.shape() && scale.numel() == x.dim(1), "{}: x {} y {} scale {}", op,
            x.describe(), y.describe(), scale.describe());
}

void check_norm_to(const BackendOps& be, const Tensor& x, const Tensor* w, int64_t group, DType out, const char* op) {
  act(be, x, op, "x");
  const int64_t cols = x.ndim() ? x.dim(-1) : 1;
  H3_ASSERT(group > 0 && cols % group == 0, "{}: group {} does not divide {}", op, group, cols);
  if (w) {
    same(x, *w, op, "w");
    H3_ASSERT(w->numel() == group, "{}: weight {} for group {}", op, w->describe(), group);
  }
  H3_ASSERT(dtype_is_float(out) && out != DType::fp8_e4m3, "{}: output dtype {} is not a float type", op,
            dtype_name(out));
}

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

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  const BackendOps& be = backend_of(x, "add_scaled");
  check_add_scaled(be, x, y, scale, "add_scaled");
  return H3_OP_CALL(be, add_scaled, x, y, scale);
}

Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t C, int64_t pt, int64_t r) {
  const BackendOps& be = backend_of(y, "unpatchify3d");
  act(be, y, "unpatchify3d", "y");
  H3_ASSERT(t >= 0 && h >= 0 && w >= 0 && C >= 0 && pt >= 0 && r >= 0 && y.ndim() == 2 && y.dim(0) == t * h * w &&
                y.dim(1) == C * pt * r * r,
            "unpatchify3d: y {} for {}x{}x{} tokens of {} values", y.describe(), t, h, w, C * pt * r * r);
  return H3_OP_CALL(be, unpatchify3d, y, t, h, w, C, pt, r);
}

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
  const BackendOps& be = backend_of(x, "snake_beta");
  act(be, x, "snake_beta", "x");
  param(be, x, alpha, "snake_beta", "alpha");
  param(be, x, beta, "snake_beta", "beta");
  H3_ASSERT(x.ndim() == 3 && alpha.numel() == x.dim(1) && beta.numel() == x.dim(1), "snake_beta: x {} alpha {} beta {}",
            x.describe(), alpha.describe(), beta.describe());
  return H3_OP_CALL(be, snake_beta, x, alpha, beta, gain);
}

Tensor slice_last(const Tensor& x, int64_t begin, int64_t end) {
  const BackendOps& be = backend_of(x, "slice_last");
  act(be, x, "slice_last", "x");
  const int64_t L = x.ndim() ? x.dim(-1) : 0;
  H3_ASSERT(0 <= begin && begin <= end && end <= L, "slice_last: [{}, {}) of {}", begin, end, x.describe());
  return H3_OP_CALL(be, slice_last, x, begin, end);
}

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
  const BackendOps& be = backend_of(x, "divide_clamp");
  act(be, x, "divide_clamp", "x");
  H3_ASSERT(divisor != 0, "divide_clamp: divisor 0");
  return H3_OP_CALL(be, divide_clamp, x, divisor, lo, hi);
}

Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps, RefNormWeight weight) {
  const BackendOps& be = backend_of(x, "rms_norm_via_f32");
  H3_ASSERT(x.device() == Device::cpu && x.dtype() == DType::f64,
            "rms_norm_via_f32: x must be an f64 host tensor, got {}", x.describe());
  const int64_t cols = x.ndim() ? x.dim(-1) : 1;
  H3_ASSERT(group > 0 && cols % group == 0, "rms_norm_via_f32: group {} does not divide {}", group, cols);
  if (w)
    H3_ASSERT(w->device() == Device::cpu && w->dtype() == DType::f64 && w->numel() == group,
              "rms_norm_via_f32: weight {} for group {}", w->describe(), group);
  return H3_OP_CALL(be, rms_norm_via_f32, x, w, group, eps, weight);
}

Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  const BackendOps& be = backend_of(x, "rms_norm_to");
  check_norm_to(be, x, w, group, out, "rms_norm_to");
  return H3_OP_CALL(be, rms_norm_to, x, w, group, eps, out);
}

std::pair<Tensor, Tensor> add_scaled_norm_to(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                             int64_t group, double eps, DType out) {
  const BackendOps& be = backend_of(x, "add_scaled_norm_to");
  check_add_scaled(be, x, y, scale, "add_scaled_norm_to");
  check_norm_to(be, x, w, group, out, "add_scaled_norm_to");
  return H3_OP_CALL(be, add_scaled_norm_to, x, y, scale, w, group, eps, out);
}

Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks) {
  const BackendOps& be = backend_of(q, "attention_blocks");
  act(be, q, "attention_blocks", "q");
  same(q, k, "attention_blocks", "k");
  same(q, v, "attention_blocks", "v");
  H3_ASSERT(blocks > 0 && head_dim > 0 && q.ndim() == 2 && k.shape() == q.shape() && v.shape() == q.shape() &&
                q.dim(0) % blocks == 0 && q.dim(1) % head_dim == 0,
            "attention_blocks: q {} k {} v {} head_dim {} in {} blocks", q.describe(), k.describe(), v.describe(),
            head_dim, blocks);
  return H3_OP_CALL(be, attention_blocks, q, k, v, head_dim, blocks);
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

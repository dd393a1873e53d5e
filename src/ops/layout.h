// The layout family of the op API (ops/ops.h has the contract every op shares): rows moved by an index, column and
// last-dim ranges, the ViT decoder's unpatchify and the video decode's stitch of overlapping tiles. Row-indexed ops
// take an i32 index tensor `idx` whose entry r names the row that row r moves to or from.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace h3::ops {

// out[idx[i]] = rows[i] (out must have the row width of rows).
void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx);
// out[i] = x[idx[i]].
Tensor gather_rows(const Tensor& x, const Tensor& idx);
// Columns [begin, end) of a 2-D tensor, as a new contiguous tensor.
Tensor columns(const Tensor& t, int64_t begin, int64_t end);
// dst[:, begin : begin + src.cols] = src.
void set_columns(Tensor& dst, int64_t begin, const Tensor& src);
// x[..., begin:end] along the last dim, as a new tensor.
Tensor slice_last(const Tensor& x, int64_t begin, int64_t end);

// The ViT decoder's unpatchify: y[V, C*pt*r*r] with V = t*h*w tokens in (t, h, w) order ->
//   out[c, ti*pt + a, yi*r + b, xi*r + e] = y[(ti*h + yi)*w + xi, ((c*pt + a)*r + b)*r + e],
// out shaped [C, t*pt, h*r, w*r].
Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t channels, int64_t pt, int64_t r);

// The video decode's stitch evaluated per output pixel, for a few finished frames at a time.
//
// A temporal chunk's tiles form a rows x cols grid, tile (a, b) = tiles[a * cols + b] of shape [C, T, h_a, w_b]
// (every tile of a row has height h_a, of a column width w_b). The reference (model/vae/tiling.h stitch_tiles) blends
// tile (a, b) first with the RAW tile above along rows, then with the RAW tile to the left along columns, then cuts
// its trailing overlaps and concatenates. Per pixel that is, with kept_a = h_a - ov_a (0 if negative; the last row
// keeps h_a), row offsets off_a = sum of kept over rows before a (the same for columns):
//   y = Y - off_a, x = X - off_b,                       where off_a <= Y < off_a + kept_a, likewise b
//   v = tile(a, b)[c, f, y, x]
//   if a > 0 and y < e = min(h_{a-1}, h_a, ov_{a-1}):  v = tile(a-1, b)[c, f, h_{a-1} - e + y, x] * (1 - y/e) + v *
//   (y/e) if b > 0 and x < e = min(w_{b-1}, w_b, ov'_{b-1}): v = tile(a, b-1)[c, f, y, w_{b-1} - e + x] * (1 - x/e) + v
//   * (x/e)
// with the weights y/e, 1 - y/e computed in the element type exactly as blend_dim does, and the two products and
// the sum each rounded (no fused multiply-add). Output frame k of `frames` is S(cur, frame) or, when fade_e > 0,
// the temporal cross-fade S(prev, prev_frame) * (1 - p/e) + S(cur, frame) * (p/e) with p = fade_p, e = fade_e
// (VideoVae::stitch's blend of a chunk's first part against the previous chunk's overlap part).
// Returns [C, frames.size(), H, W] with H = sum of kept rows, W = sum of kept columns, on the tiles' device (f32 or
// f64 on the CPU, f32 on a GPU). Bitwise the same as VideoVae::stitch's frames for the same tiles.
struct StitchGrid {
  int64_t rows = 0, cols = 0;
  std::vector<int64_t> row_overlaps, col_overlaps;  // pixels between tile rows a and a + 1 (columns b and b + 1)
};
struct StitchFrame {
  int64_t frame = 0;       // frame index f inside the current chunk's tiles
  int64_t prev_frame = 0;  // frame inside the previous chunk's tiles (used when fade_e > 0)
  int64_t fade_p = 0, fade_e = 0;
};
Tensor stitch_frames(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const StitchGrid& grid,
                     const std::vector<StitchFrame>& frames);

// The per-axis numbers of the equations above, checked against the tiles (shared by the backends):
// size[a] = h_a, kept[a], off[a] (off[n] = H), extent[a] = min(h_{a-1}, h_a, ov_{a-1}) (0 for a = 0).
struct StitchAxis {
  std::vector<int64_t> size, kept, off, extent;
};
struct StitchLayout {
  int64_t channels = 0, tile_frames = 0;
  StitchAxis rows, cols;
};
// Fails naming `op` when the tiles do not form the grid (count, rank, shapes, dtypes, devices).
StitchLayout stitch_layout(const std::vector<Tensor>& tiles, const StitchGrid& grid, const char* op);

}  // namespace h3::ops

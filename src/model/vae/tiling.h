// Tensor plumbing of the video VAE's tiling and chunking: slices, concatenation and the reference's linear
// cross-fade along one dimension of a 4-D [C, T, H, W] tensor, and the tile-grid stitch (diffusers `_blend`,
// `_stitch_tiles`). Every function is a pure function of its inputs, so stitching is deterministic.
#pragma once
#include <vector>

#include "core/tensor.h"

namespace h3::vae {

// t[..., begin:end, ...] along `dim` (1..3) of a 4-D tensor, as a new tensor.
Tensor slice_dim(const Tensor& t, int dim, int64_t begin, int64_t end);
// t[:, t0:t1, y0:y1, x0:x1] of a 4-D host tensor, as a new tensor: one serial pass (a decode unit's latents are
// small; the three slice_dim calls it replaces each started threads).
Tensor crop(const Tensor& t, int64_t t0, int64_t t1, int64_t y0, int64_t y1, int64_t x0, int64_t x1);
// Concatenation along `dim` (other dims must agree).
Tensor concat_dim(const std::vector<Tensor>& parts, int dim);
// The reference's _blend(a, b, extent, dim): e = min(|a|, |b|, extent) along dim; the first e entries of b become
// a[|a| - e + p] * (1 - p/e) + b[p] * (p/e); the rest of b is kept. Returns a tensor shaped like b.
Tensor blend_dim(const Tensor& a, const Tensor& b, int64_t extent, int dim);
// The reference's _stitch_tiles: tile (i, j) is first blended against the raw tile above (rows, dim 2), then
// against the raw tile to its left (dim 3), then its trailing overlaps are cut; rows are concatenated.
Tensor stitch_tiles(const std::vector<std::vector<Tensor>>& tiles, const std::vector<int64_t>& row_overlaps,
                    const std::vector<int64_t>& col_overlaps);

}  // namespace h3::vae

#include "model/vae/tiling.h"

#include "core/parallel.h"

#include <algorithm>
#include <cstring>

namespace h3::vae {

namespace {
// Sizes of a 4-D tensor as (outer, n, inner) around `dim`.
void split_shape(const Tensor& t, int dim, int64_t& outer, int64_t& n, int64_t& inner) {
  H3_ASSERT(t.ndim() == 4 && dim >= 0 && dim < 4, "vae tiling: {} dim {}", t.describe(), dim);
  outer = 1;
  inner = 1;
  for (int d = 0; d < dim; ++d) outer *= t.dim(d);
  for (int d = dim + 1; d < 4; ++d) inner *= t.dim(d);
  n = t.dim(dim);
}
}  // namespace

Tensor slice_dim(const Tensor& t, int dim, int64_t begin, int64_t end) {
  int64_t outer, n, inner;
  split_shape(t, dim, outer, n, inner);
  begin = std::clamp<int64_t>(begin, 0, n);
  end = std::clamp<int64_t>(end, begin, n);
  Shape s = t.shape();
  s[dim] = end - begin;
  Tensor out(t.dtype(), s);
  const size_t es = dtype_size(t.dtype());
  const auto* src = static_cast<const std::byte*>(t.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  const size_t chunk = static_cast<size_t>((end - begin) * inner) * es;
  // Pure copies, so splitting the outer index over threads cannot change a value (full-size stitches move GBs).
  // parallel_for starts its threads per call: only worth it for a few MB a thread.
  const int64_t min_chunk = std::max<int64_t>(1, static_cast<int64_t>((size_t{4} << 20) / std::max<size_t>(chunk, 1)));
  parallel_for(
      outer,
      [&](int64_t o0, int64_t o1) {
        for (int64_t o = o0; o < o1; ++o)
          std::memcpy(dst + o * chunk, src + (static_cast<size_t>((o * n + begin) * inner)) * es, chunk);
      },
      min_chunk);
  return out;
}

Tensor crop(const Tensor& t, int64_t t0, int64_t t1, int64_t y0, int64_t y1, int64_t x0, int64_t x1) {
  H3_ASSERT(t.ndim() == 4 && !t.on_device(), "vae crop: {} (a host [C, T, H, W] tensor)", t.describe());
  const int64_t C = t.dim(0), T = t.dim(1), H = t.dim(2), W = t.dim(3);
  H3_ASSERT(0 <= t0 && t0 <= t1 && t1 <= T && 0 <= y0 && y0 <= y1 && y1 <= H && 0 <= x0 && x0 <= x1 && x1 <= W,
            "vae crop: [{}, {}) x [{}, {}) x [{}, {}) of {}", t0, t1, y0, y1, x0, x1, t.describe());
  Tensor out(t.dtype(), {C, t1 - t0, y1 - y0, x1 - x0});
  const size_t es = dtype_size(t.dtype()), row = static_cast<size_t>(x1 - x0) * es;
  const auto* src = static_cast<const std::byte*>(t.raw());
  auto* dst = static_cast<std::byte*>(out.raw());
  for (int64_t c = 0; c < C; ++c)
    for (int64_t f = t0; f < t1; ++f)
      for (int64_t y = y0; y < y1; ++y, dst += row)
        std::memcpy(dst, src + static_cast<size_t>(((c * T + f) * H + y) * W + x0) * es, row);
  return out;
}

Tensor concat_dim(const std::vector<Tensor>& parts, int dim) {
  H3_ASSERT(!parts.empty(), "concat_dim: nothing to concatenate");
  Shape s = parts[0].shape();
  int64_t total = 0;
  for (const auto& p : parts) {
    H3_ASSERT(p.ndim() == 4 && p.dtype() == parts[0].dtype(), "concat_dim: {} vs {}", p.describe(),
              parts[0].describe());
    for (int d = 0; d < 4; ++d)
      H3_ASSERT(d == dim || p.dim(d) == s[d], "concat_dim: {} vs {} along {}", p.describe(), parts[0].describe(), dim);
    total += p.dim(dim);
  }
  s[dim] = total;
  Tensor out(parts[0].dtype(), s);
  int64_t outer, n, inner;
  split_shape(out, dim, outer, n, inner);
  const size_t es = dtype_size(out.dtype());
  auto* dst = static_cast<std::byte*>(out.raw());
  int64_t offset = 0;
  for (const auto& p : parts) {
    const int64_t pn = p.dim(dim);
    const auto* src = static_cast<const std::byte*>(p.raw());
    const size_t chunk = static_cast<size_t>(pn * inner) * es;
    parallel_for(outer, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        std::memcpy(dst + static_cast<size_t>((o * n + offset) * inner) * es, src + o * chunk, chunk);
    });
    offset += pn;
  }
  return out;
}

Tensor blend_dim(const Tensor& a, const Tensor& b, int64_t extent, int dim) {
  int64_t ao, an, ai, bo, bn, bi;
  split_shape(a, dim, ao, an, ai);
  split_shape(b, dim, bo, bn, bi);
  H3_ASSERT(ao == bo && ai == bi && a.dtype() == b.dtype(), "blend_dim: {} vs {} along {}", a.describe(), b.describe(),
            dim);
  const int64_t e = std::min({an, bn, extent});
  Tensor out(b.dtype(), b.shape());  // a copy of b, made by all threads
  {
    const auto* src = static_cast<const std::byte*>(b.raw());
    auto* dst = static_cast<std::byte*>(out.raw());
    const int64_t bytes = static_cast<int64_t>(b.nbytes()), block = int64_t{1} << 20;
    parallel_for((bytes + block - 1) / block, [&](int64_t k0, int64_t k1) {
      const int64_t from = k0 * block, to = std::min(bytes, k1 * block);
      std::memcpy(dst + from, src + from, static_cast<size_t>(to - from));
    });
  }
  if (e <= 0) return out;
  auto run = [&]<typename T>(T) {
    const T* ap = a.data<T>();
    T* op = out.data<T>();
    // Every element is blended once with its own weights: the outer index may be split over threads.
    parallel_for(ao, [&](int64_t o0, int64_t o1) {
      for (int64_t p = 0; p < e; ++p) {
        const T wb = T(static_cast<double>(p)) / T(static_cast<double>(e));
        const T wa = T(1) - wb;
        for (int64_t o = o0; o < o1; ++o) {
          const T* ar = ap + (o * an + an - e + p) * ai;
          T* br = op + (o * bn + p) * bi;
          for (int64_t i = 0; i < ai; ++i) br[i] = ar[i] * wa + br[i] * wb;
        }
      }
    });
  };
  if (a.dtype() == DType::f32)
    run(float{});
  else
    run(double{});
  return out;
}

Tensor stitch_tiles(const std::vector<std::vector<Tensor>>& tiles, const std::vector<int64_t>& row_overlaps,
                    const std::vector<int64_t>& col_overlaps) {
  std::vector<Tensor> rows;
  for (size_t i = 0; i < tiles.size(); ++i) {
    std::vector<Tensor> row;
    for (size_t j = 0; j < tiles[i].size(); ++j) {
      Tensor tile = tiles[i][j];
      if (i > 0) tile = blend_dim(tiles[i - 1][j], tile, row_overlaps[i - 1], 2);
      if (j > 0) tile = blend_dim(tiles[i][j - 1], tile, col_overlaps[j - 1], 3);
      if (i + 1 < tiles.size()) tile = slice_dim(tile, 2, 0, tile.dim(2) - row_overlaps[i]);
      if (j + 1 < tiles[i].size()) tile = slice_dim(tile, 3, 0, tile.dim(3) - col_overlaps[j]);
      row.push_back(std::move(tile));
    }
    rows.push_back(concat_dim(row, 3));
  }
  return concat_dim(rows, 2);
}

}  // namespace h3::vae

// The layout family's CUDA entries (ops/layout.h): rows gathered and scattered by an index, column ranges and the last
// dim's ranges (strided copies), the ViT decoder's unpatchify and the video decode's stitch (backend/cuda/layout.h).
#include <algorithm>
#include <cstddef>

#include "backend/cuda/common.h"
#include "backend/cuda/layout.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

namespace {

int64_t row_bytes_of(const Tensor& t) {
  int64_t w = 1;
  for (int i = 1; i < t.ndim(); ++i) w *= t.dim(i);
  return w * static_cast<int64_t>(dtype_size(t.dtype()));
}

}  // namespace

void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx) {
  Tensor src = rows.to_device(Device::cuda);
  Tensor i = index_on_gpu(idx);
  H3_CUDA(cuda::scatter_rows(src.raw(), i.data<int32_t>(), out.raw(), rows.dim(0), row_bytes_of(out), stream()));
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  Shape s = x.shape();
  s[0] = idx.numel();
  Tensor out = Tensor::empty(x.dtype(), s, Device::cuda);
  Tensor i = index_on_gpu(idx);
  H3_CUDA(cuda::gather_rows(x.raw(), i.data<int32_t>(), out.raw(), idx.numel(), row_bytes_of(x), stream()));
  return out;
}

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const size_t es = dtype_size(t.dtype());
  Tensor out = Tensor::empty(t.dtype(), {t.dim(0), end - begin}, Device::cuda);
  if (out.numel() == 0) return out;
  H3_CUDA(cudaMemcpy2DAsync(out.raw(), (end - begin) * es, static_cast<const std::byte*>(t.raw()) + begin * es,
                            t.dim(1) * es, (end - begin) * es, t.dim(0), cudaMemcpyDeviceToDevice, stream()));
  return out;
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  if (src.numel() == 0) return;
  const size_t es = dtype_size(dst.dtype());
  Tensor s = src.to_device(Device::cuda);
  H3_CUDA(cudaMemcpy2DAsync(static_cast<std::byte*>(dst.raw()) + begin * es, dst.dim(1) * es, s.raw(), src.dim(1) * es,
                            src.dim(1) * es, src.dim(0), cudaMemcpyDeviceToDevice, stream()));
}

Tensor slice_last(const Tensor& x, int64_t begin, int64_t end) {
  const int64_t L = x.ndim() ? x.dim(-1) : 0, rows = L ? x.numel() / L : 0;
  Shape s = x.shape();
  s.back() = end - begin;
  Tensor y = Tensor::empty(x.dtype(), s, Device::cuda);
  if (y.numel() == 0) return y;
  const size_t es = dtype_size(x.dtype());
  H3_CUDA(cudaMemcpy2DAsync(y.raw(), (end - begin) * es, static_cast<const std::byte*>(x.raw()) + begin * es, L * es,
                            (end - begin) * es, rows, cudaMemcpyDeviceToDevice, stream()));
  return y;
}

Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t C, int64_t pt, int64_t r) {
  Tensor out = Tensor::empty(y.dtype(), {C, t * pt, h * r, w * r}, Device::cuda);
  H3_CUDA(cuda::unpatchify3d(y.raw(), out.raw(), elem_type(y.dtype()), t, h, w, C, pt, r, stream()));
  return out;
}

Tensor stitch_frames(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const ops::StitchGrid& g,
                     const std::vector<ops::StitchFrame>& frames, const ops::StitchLayout& l,
                     const ops::StitchLayout& lp) {
  H3_CHECK(cur[0].dtype() == DType::f32, "stitch_frames on the GPU: the kernel takes f32 tiles, got {}",
           cur[0].describe());
  H3_CHECK(g.rows <= kStitchMaxAxis && g.cols <= kStitchMaxAxis && g.rows * g.cols <= kStitchMaxTiles,
           "video decode stitch on the GPU: a {} x {} tile grid is larger than the kernel's {} x {} ({} tiles); raise "
           "kStitchMaxAxis/kStitchMaxTiles in backend/cuda/layout.h or use larger tiles",
           g.rows, g.cols, kStitchMaxAxis, kStitchMaxAxis, kStitchMaxTiles);
  const int64_t H = l.rows.off.back(), W = l.cols.off.back();
  H3_CHECK(H < (int64_t{1} << 30) / std::max<int64_t>(W, 1) && l.channels * l.tile_frames * H * W < (int64_t{1} << 40),
           "video decode stitch on the GPU: {} x {} frames are too large for 32-bit pixel indices", H, W);
  StitchArgs a{};
  a.rows = static_cast<int32_t>(g.rows), a.cols = static_cast<int32_t>(g.cols);
  a.channels = static_cast<int32_t>(l.channels), a.cur_frames = static_cast<int32_t>(l.tile_frames);
  a.height = static_cast<int32_t>(H), a.width = static_cast<int32_t>(W);
  for (int64_t i = 0; i < g.rows; ++i) {
    a.row_size[i] = static_cast<int32_t>(l.rows.size[i]);
    a.row_off[i] = static_cast<int32_t>(l.rows.off[i]);
    a.row_extent[i] = static_cast<int32_t>(l.rows.extent[i]);
  }
  a.row_off[g.rows] = static_cast<int32_t>(H);
  for (int64_t i = 0; i < g.cols; ++i) {
    a.col_size[i] = static_cast<int32_t>(l.cols.size[i]);
    a.col_off[i] = static_cast<int32_t>(l.cols.off[i]);
    a.col_extent[i] = static_cast<int32_t>(l.cols.extent[i]);
  }
  a.col_off[g.cols] = static_cast<int32_t>(W);
  bool fades = false;
  for (const auto& f : frames) fades = fades || f.fade_e > 0;
  for (size_t i = 0; i < cur.size(); ++i) a.cur[i] = static_cast<const float*>(cur[i].raw());
  if (fades) {
    a.prev_frames = static_cast<int32_t>(lp.tile_frames);
    for (size_t i = 0; i < prev.size(); ++i) a.prev[i] = static_cast<const float*>(prev[i].raw());
  }
  const int64_t F = static_cast<int64_t>(frames.size());
  Tensor out = Tensor::empty(DType::f32, {l.channels, F, H, W}, Device::cuda);
  // The kernel takes kStitchMaxFrames frames per launch; a launch writes its frames into a [C, n, H, W] piece.
  const int64_t plane = H * W;
  for (int64_t k0 = 0; k0 < F; k0 += kStitchMaxFrames) {
    const int64_t n = std::min<int64_t>(kStitchMaxFrames, F - k0);
    a.n_frames = static_cast<int32_t>(n);
    for (int64_t k = 0; k < n; ++k) {
      const ops::StitchFrame& f = frames[k0 + k];
      a.frame[k] = static_cast<int32_t>(f.frame);
      a.prev_frame[k] = static_cast<int32_t>(f.prev_frame);
      a.fade_p[k] = static_cast<int32_t>(f.fade_p);
      a.fade_e[k] = static_cast<int32_t>(f.fade_e);
    }
    if (n == F) {
      H3_CUDA(cuda::stitch_frames(a, static_cast<float*>(out.raw()), stream()));
      break;
    }
    Tensor piece = Tensor::empty(DType::f32, {l.channels, n, H, W}, Device::cuda);
    H3_CUDA(cuda::stitch_frames(a, static_cast<float*>(piece.raw()), stream()));
    // piece[c] (n frames) -> out[c, k0 : k0 + n]
    H3_CUDA(cudaMemcpy2DAsync(static_cast<float*>(out.raw()) + k0 * plane, F * plane * sizeof(float), piece.raw(),
                              n * plane * sizeof(float), n * plane * sizeof(float), l.channels,
                              cudaMemcpyDeviceToDevice, stream()));
  }
  return out;
}

}  // namespace h3::cuda::op

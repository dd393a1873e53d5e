// The CUDA backend's entries for the VAE decoders' ops (ops_conv.h: layer_norm, conv1d, conv_transpose1d, pad1d;
// ops_vae.h), the front door having checked shapes and dtypes: a kernel of backend/cuda/vae_kernels.cu or, for dense
// conv1d, im2col + the cuBLASLt GEMM. Activations are f32 or bf16 GPU tensors; parameters are taken in the activation's
// dtype (converted when they are not, which the models avoid by uploading them once in the right dtype).
#include <algorithm>
#include <cstddef>
#include <cstdlib>
#include <string>

#include "backend/cuda/attention/attention.h"
#include "backend/cuda/common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/tensors.h"
#include "backend/cuda/vae_kernels.h"
#include "ops/backend_ops.h"
#include "ops/ops_vae.h"

namespace h3::cuda {

namespace {

Tensor layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps) {
  const int64_t C = x.ndim() ? x.dim(-1) : 1, rows = C ? x.numel() / C : 0;
  const Tensor wd = w ? on_gpu(*w, x.dtype()) : Tensor(), bd = b ? on_gpu(*b, x.dtype()) : Tensor();
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::layer_norm(x.raw(), w ? wd.raw() : nullptr, b ? bd.raw() : nullptr, y.raw(), elem_type(x.dtype()), rows,
                           C, static_cast<float>(eps), stream()));
  return y;
}

// Dense convolutions with enough work per output run as im2col + GEMM (cuBLASLt, f32 without TF32 or bf16 with
// f32 accumulation); small, grouped and depthwise ones as a direct kernel.
bool conv1d_as_gemm(int64_t groups, int64_t C, int64_t K, int64_t O) {
  return groups == 1 && C * K >= 16 && O >= 16;
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t dilation,
              int64_t groups) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), O = w.dim(0), K = w.dim(2);
  const int64_t span = (K - 1) * dilation + 1;
  const int64_t Lo = (L + 2 * pad - span) / stride + 1;
  const DType dt = x.dtype();
  const Tensor wd = on_gpu(w, dt), bd = bias ? on_gpu(*bias, dt) : Tensor();
  Tensor y = Tensor::empty(dt, {B, O, Lo}, Device::cuda);
  if (!conv1d_as_gemm(groups, C, K, O)) {
    H3_CUDA(conv1d_direct(x.raw(), wd.raw(), bias ? bd.raw() : nullptr, y.raw(), elem_type(dt), B, C, L, O, K, Lo,
                          stride, pad, dilation, groups, stream()));
    return y;
  }
  // cols [B*Lo, C*K] (rows = output positions), rows = cols * w[O, C*K]^T + bias -> [B*Lo, O] -> y [B, O, Lo].
  Tensor cols = Tensor::empty(dt, {B * Lo, C * K}, Device::cuda);
  H3_CUDA(conv1d_im2col(x.raw(), cols.raw(), elem_type(dt), B, C, L, K, Lo, stride, pad, dilation, stream()));
  Tensor rows = Tensor::empty(dt, {B * Lo, O}, Device::cuda);
  GemmArgs g;
  g.x = cols.raw();
  g.w = wd.raw();
  g.y = rows.raw();
  g.bias = bias ? bd.raw() : nullptr;
  g.n = B * Lo, g.m = O, g.k = C * K;
  g.in = dt, g.out = dt;
  gemm(g);
  H3_CUDA(rows_to_channels(rows.raw(), y.raw(), elem_type(dt), B, O, Lo, stream()));
  return y;
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad,
                        int64_t groups) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), opg = w.dim(1), K = w.dim(2);
  const int64_t O = opg * groups, Lo = (L - 1) * stride - 2 * pad + K;
  const DType dt = x.dtype();
  const Tensor wd = on_gpu(w, dt), bd = bias ? on_gpu(*bias, dt) : Tensor();
  Tensor y = Tensor::empty(dt, {B, O, Lo}, Device::cuda);
  H3_CUDA(cuda::conv_transpose1d(x.raw(), wd.raw(), bias ? bd.raw() : nullptr, y.raw(), elem_type(dt), B, C, L, O, K,
                                 Lo, stride, pad, groups, stream()));
  return y;
}

Tensor pad1d(const Tensor& x, int64_t left, int64_t right, ops::PadMode mode) {
  const int64_t L = x.dim(-1), rows = L ? x.numel() / L : 0;
  Shape s = x.shape();
  s.back() = L + left + right;
  Tensor y = Tensor::empty(x.dtype(), s, Device::cuda);
  H3_CUDA(cuda::pad1d(x.raw(), y.raw(), elem_type(x.dtype()), rows, L, left, right, static_cast<int>(mode), stream()));
  return y;
}

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  const Tensor sd = on_gpu(scale, x.dtype());
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::add_scaled(x.raw(), y.raw(), sd.raw(), out.raw(), elem_type(x.dtype()), elem_type(y.dtype()), x.dim(0),
                           x.dim(1), stream()));
  return out;
}

Tensor unpatchify3d(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t C, int64_t pt, int64_t r) {
  Tensor out = Tensor::empty(y.dtype(), {C, t * pt, h * r, w * r}, Device::cuda);
  H3_CUDA(cuda::unpatchify3d(y.raw(), out.raw(), elem_type(y.dtype()), t, h, w, C, pt, r, stream()));
  return out;
}

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
  const Tensor a = on_gpu(alpha, x.dtype()), b = on_gpu(beta, x.dtype());
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::snake_beta(x.raw(), a.raw(), b.raw(), y.raw(), elem_type(x.dtype()), x.dim(0), x.dim(1), x.dim(2),
                           static_cast<float>(gain), stream()));
  return y;
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

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::divide_clamp(x.raw(), y.raw(), elem_type(x.dtype()), x.numel(), static_cast<float>(divisor),
                             static_cast<float>(lo), static_cast<float>(hi), stream()));
  return y;
}

// f32 -> bf16 in one pass; any other pairing as the two steps it stands for.
Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  const bool fused =
      x.dtype() == DType::f32 && out == DType::bf16 && (!w || (w->on_device() && w->dtype() == DType::f32));
  if (!fused) {
    Tensor y = ops::rms_norm(x, w, group, eps);
    return y.dtype() == out ? y : y.to(out);
  }
  const int64_t cols = x.ndim() ? x.dim(-1) : 1, rows = cols ? x.numel() / cols : 0;
  Tensor y = Tensor::empty(DType::bf16, x.shape(), Device::cuda);
  H3_CUDA(rms_norm_f32_to_bf16(static_cast<const float*>(x.raw()), w ? static_cast<const float*>(w->raw()) : nullptr,
                               y.raw(), rows, cols, group, static_cast<float>(eps), stream()));
  return y;
}

// One pass for the decoder's case (f32 x, f32 or bf16 y, f32 scale and weight, bf16 out); the two ops otherwise.
std::pair<Tensor, Tensor> add_scaled_norm_to(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                             int64_t group, double eps, DType out) {
  const int64_t cols = x.ndim() == 2 ? x.dim(1) : 0;
  const bool fused = x.dtype() == DType::f32 && out == DType::bf16 && x.ndim() == 2 && y.shape() == x.shape() &&
                     (y.dtype() == DType::f32 || y.dtype() == DType::bf16) && scale.numel() == cols && group > 0 &&
                     cols % group == 0 && group <= 1024 * kResidualNormMaxPer &&
                     (!w || (w->on_device() && w->dtype() == DType::f32 && w->numel() == group));
  if (!fused) {
    Tensor sum = add_scaled(x, y, scale);
    Tensor normed = rms_norm_to(sum, w, group, eps, out);
    return {std::move(sum), std::move(normed)};
  }
  const Tensor sd = on_gpu(scale, DType::f32);
  Tensor sum = Tensor::empty(DType::f32, x.shape(), Device::cuda);
  Tensor normed = Tensor::empty(DType::bf16, x.shape(), Device::cuda);
  H3_CUDA(add_scaled_rms_norm_to_bf16(static_cast<const float*>(x.raw()), y.raw(), elem_type(y.dtype()),
                                      static_cast<const float*>(sd.raw()), static_cast<float*>(sum.raw()),
                                      w ? static_cast<const float*>(w->raw()) : nullptr, normed.raw(), x.dim(0), cols,
                                      group, static_cast<float>(eps), stream()));
  return {std::move(sum), std::move(normed)};
}

// The blocks as the batch of one cuDNN SDPA call (each (block, head) computed alone, as attention() on the block's
// rows); one attention() call per block where that is not available (f32, no cuDNN, a refused shape).
Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d, int64_t blocks) {
  const int64_t n = q.dim(0) / blocks, cols = q.dim(1);
  const size_t block_bytes = static_cast<size_t>(n * cols) * dtype_size(q.dtype());
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  if (blocks > 1 && cuda::attention_batched(q.raw(), k.raw(), v.raw(), out.raw(), q.dtype(), blocks, n, cols / d, d))
    return out;
  for (int64_t b = 0; b < blocks; ++b) {
    auto at = [&](const Tensor& t) { return static_cast<std::byte*>(t.raw()) + b * block_bytes; };
    cuda::attention(at(q), at(k), at(v), at(out), q.dtype(), n, n, cols / d, d);
  }
  return out;
}

Tensor stitch_frames(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const ops::StitchGrid& g,
                     const std::vector<ops::StitchFrame>& frames, const ops::StitchLayout& l,
                     const ops::StitchLayout& lp) {
  H3_CHECK(cur[0].dtype() == DType::f32, "stitch_frames on the GPU: the kernel takes f32 tiles, got {}",
           cur[0].describe());
  H3_CHECK(g.rows <= kStitchMaxAxis && g.cols <= kStitchMaxAxis && g.rows * g.cols <= kStitchMaxTiles,
           "video decode stitch on the GPU: a {} x {} tile grid is larger than the kernel's {} x {} ({} tiles); raise "
           "kStitchMaxAxis/kStitchMaxTiles in backend/cuda/vae_kernels.h or use larger tiles",
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

}  // namespace

void register_vae_ops(ops::BackendOps& t) {
  t.layer_norm = layer_norm;
  t.conv1d = conv1d;
  t.conv_transpose1d = conv_transpose1d;
  t.pad1d = pad1d;
  t.add_scaled = add_scaled;
  t.unpatchify3d = unpatchify3d;
  t.snake_beta = snake_beta;
  t.slice_last = slice_last;
  t.divide_clamp = divide_clamp;
  t.rms_norm_to = rms_norm_to;
  t.add_scaled_norm_to = add_scaled_norm_to;
  t.attention_blocks = attention_blocks;
  t.stitch_frames = stitch_frames;
}

}  // namespace h3::cuda

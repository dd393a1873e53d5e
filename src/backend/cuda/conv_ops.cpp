// The convolution family's CUDA entries (ops/conv.h): 1-D convolutions (dense ones as im2col + the cuBLASLt GEMM, the
// rest direct), transposed 1-D convolutions and 1-D padding (backend/cuda/conv.h).

#include "backend/cuda/common.h"
#include "backend/cuda/conv.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

namespace {

// Dense convolutions with enough work per output run as im2col + GEMM (cuBLASLt, f32 without TF32 or bf16 with
// f32 accumulation); small, grouped and depthwise ones as a direct kernel.
bool conv1d_as_gemm(int64_t groups, int64_t C, int64_t K, int64_t O) {
  return groups == 1 && C * K >= 16 && O >= 16;
}

}  // namespace

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

}  // namespace h3::cuda::op

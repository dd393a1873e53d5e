// The Qwen3-VL towers' device ops (ops_conv.h attention_causal, ops_act.h gelu_*, ops_text.h) on the GPU:
// backend/cuda/attention/causal.cu, backend/cuda/text_kernels.cu or the cuBLASLt GEMM, the front door (src/ops)
// having checked shapes and dtypes.
#include "backend/cuda/attention/causal.h"
#include "backend/cuda/common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/tensors.h"
#include "backend/cuda/text_kernels.h"
#include "ops/backend_ops.h"

namespace h3::cuda {

namespace {

Tensor attention_causal_op(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  H3_CHECK(d <= 256, "attention_causal on the GPU: head_dim {} (the kernel takes at most 256)", d);
  const int64_t heads = q.dim(1) / d, kv_heads = k.dim(1) / d;
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  H3_CUDA(cuda::attention_causal(q.raw(), k.raw(), v.raw(), out.raw(), elem_type(q.dtype()), q.dim(0), heads, kv_heads,
                                 d, stream()));
  return out;
}

Tensor gelu_op(const Tensor& x, bool tanh_form) {
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::gelu(x.raw(), out.raw(), elem_type(x.dtype()), x.numel(), tanh_form, stream()));
  return out;
}
Tensor gelu_tanh_op(const Tensor& x) {
  return gelu_op(x, true);
}
Tensor gelu_erf_op(const Tensor& x) {
  return gelu_op(x, false);
}

Tensor rms_norm_rounded_op(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  const int64_t rows = x.ndim() ? x.dim(0) : 1, cols = rows ? x.numel() / rows : 0;
  const Tensor wd = on_gpu(w, x.dtype());
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::rms_norm_rounded(x.raw(), wd.raw(), y.raw(), elem_type(x.dtype()), rows, cols, group,
                                 static_cast<float>(eps), stream()));
  return y;
}

Tensor linear_acc_op(const Tensor& x, const Tensor& w) {
  const Tensor xc = on_gpu(x, w.dtype());
  Tensor y = Tensor::empty(DType::f32, {x.dim(0), w.dim(0)}, Device::cuda);
  GemmArgs g;
  g.x = xc.raw();
  g.w = w.raw();
  g.y = y.raw();
  g.n = x.dim(0), g.m = w.dim(0), g.k = w.dim(1);
  g.in = w.dtype(), g.out = DType::f32;
  gemm(g);
  return y;
}

}  // namespace

void register_text_ops(ops::BackendOps& t) {
  t.attention_causal = attention_causal_op;
  t.gelu_tanh = gelu_tanh_op;
  t.gelu_erf = gelu_erf_op;
  t.rms_norm_rounded = rms_norm_rounded_op;
  t.linear_acc = linear_acc_op;
}

}  // namespace h3::cuda

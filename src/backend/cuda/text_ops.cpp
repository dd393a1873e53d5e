// The text tower's device op (ops_conv.h's attention_causal on the GPU): backend/cuda/attention/causal.cu, the
// front door having checked shapes and dtypes.
#include "backend/cuda/attention/causal.h"
#include "backend/cuda/common.h"
#include "ops/backend_ops.h"

namespace h3::cuda {

ElemType elem_type(DType t);  // backend/cuda/runtime.cpp

namespace {

Tensor attention_causal_op(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  H3_CHECK(d <= 256, "attention_causal on the GPU: head_dim {} (the kernel takes at most 256)", d);
  const int64_t heads = q.dim(1) / d, kv_heads = k.dim(1) / d;
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  H3_CUDA(cuda::attention_causal(q.raw(), k.raw(), v.raw(), out.raw(), elem_type(q.dtype()), q.dim(0), heads, kv_heads,
                                 d, stream()));
  return out;
}

}  // namespace

void register_text_ops(ops::BackendOps& t) {
  t.attention_causal = attention_causal_op;
}

}  // namespace h3::cuda

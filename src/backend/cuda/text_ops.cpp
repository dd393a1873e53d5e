// The text tower's device ops (ops_conv.h's attention_causal on the GPU): checks, then
// backend/cuda/attention/causal.cu.
#include "backend/cuda/attention/causal.h"
#include "backend/cuda/common.h"
#include "ops/device_ops.h"

namespace h3::cuda {

ElemType elem_type(DType t);  // backend/cuda/runtime.cpp

namespace {

Tensor attention_causal_op(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  H3_ASSERT(q.on_device() && k.on_device() && v.on_device() && (q.dtype() == DType::f32 || q.dtype() == DType::bf16) &&
                k.dtype() == q.dtype() && v.dtype() == q.dtype(),
            "attention_causal: q {} k {} v {} must be GPU tensors of one dtype (f32 or bf16)", q.describe(),
            k.describe(), v.describe());
  H3_ASSERT(d > 0 && d <= 256 && q.ndim() == 2 && k.ndim() == 2 && v.shape() == k.shape() && k.dim(0) == q.dim(0),
            "attention_causal: q {} k {} v {} head_dim {} (<= 256 on the GPU)", q.describe(), k.describe(),
            v.describe(), d);
  const int64_t heads = q.dim(1) / d, kv_heads = k.dim(1) / d;
  H3_ASSERT(q.dim(1) % d == 0 && k.dim(1) % d == 0 && kv_heads > 0 && heads % kv_heads == 0,
            "attention_causal: {} query / {} key channels are not whole heads of {} (or not grouped)", q.dim(1),
            k.dim(1), d);
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  H3_CUDA(cuda::attention_causal(q.raw(), k.raw(), v.raw(), out.raw(), elem_type(q.dtype()), q.dim(0), heads, kv_heads,
                                 d, stream()));
  return out;
}

}  // namespace

void register_text_ops(ops::DeviceOps& t) {
  t.attention_causal = attention_causal_op;
}

}  // namespace h3::cuda

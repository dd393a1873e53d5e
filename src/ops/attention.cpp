// The front door of ops/attention.h: shapes and dtypes checked once, then the entry of the backend holding q
// (ops/backend_ops.h).
#include "ops/attention.h"

#include "ops/checks.h"

namespace h3::ops {

namespace {

// q [Nq, H*D], k/v [Nk, H*D]: the float path (q, k, v of one dtype) or, on an fp8 backend, fp8 q and k with
// per-tensor scales and v fp8 (scaled) or bf16.
void check_attention(const BackendOps& be, const Tensor& q, const Tensor& k, const Tensor& v, int64_t d,
                     const char* op) {
  if (q.dtype() == DType::fp8_e4m3) {
    check::fp8_per_tensor(be, q, op, "q");
    check::fp8_per_tensor(be, k, op, "k");
    if (v.dtype() == DType::bf16)
      H3_ASSERT(v.device() == q.device(), "{}: bf16 v {} must sit with q", op, v.describe());
    else
      check::fp8_per_tensor(be, v, op, "v");
  } else {
    act(be, q, op, "q");
    same(q, {{k, "k"}, {v, "v"}}, op);
  }
  H3_ASSERT(d > 0 && q.ndim() == 2 && k.ndim() == 2 && v.ndim() == 2, "{}: head_dim {} with q {} k {} v {}", op, d,
            q.describe(), k.describe(), v.describe());
  const int64_t cols = q.dim(1);
  H3_ASSERT(k.dim(1) == cols && v.shape() == k.shape() && cols % d == 0, "{}: q {} k {} v {} head_dim {}", op,
            q.describe(), k.describe(), v.describe(), d);
  H3_ASSERT(q.dim(0) == 0 || k.dim(0) > 0, "{}: {} queries but no keys", op, q.dim(0));
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) {
  const BackendOps& be = backend_of(q, "attention");
  check_attention(be, q, k, v, head_dim, "attention");
  return H3_OP_CALL(be, attention, q, k, v, head_dim);
}

Tensor attention_fp8_out(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) {
  const BackendOps& be = backend_of(q, "attention_fp8_out");
  H3_ASSERT(q.dtype() == DType::fp8_e4m3, "attention_fp8_out: fp8 q/k/v needed, got {}", q.describe());
  check_attention(be, q, k, v, head_dim, "attention_fp8_out");
  return H3_OP_CALL(be, attention_fp8_out, q, k, v, head_dim);
}

Tensor attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  const BackendOps& be = backend_of(q, "attention_causal");
  act(be, q, "attention_causal", "q");
  same(q, {{k, "k"}, {v, "v"}}, "attention_causal");
  H3_ASSERT(d > 0 && q.ndim() == 2 && k.ndim() == 2 && v.shape() == k.shape() && k.dim(0) == q.dim(0),
            "attention_causal: q {} k {} v {} head_dim {}", q.describe(), k.describe(), v.describe(), d);
  const int64_t heads = q.dim(1) / d, kv_heads = k.dim(1) / d;
  H3_ASSERT(q.dim(1) % d == 0 && k.dim(1) % d == 0 && kv_heads > 0 && heads % kv_heads == 0,
            "attention_causal: {} query / {} key channels are not whole heads of {} (or not grouped)", q.dim(1),
            k.dim(1), d);
  return H3_OP_CALL(be, attention_causal, q, k, v, d);
}

Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks) {
  const BackendOps& be = backend_of(q, "attention_blocks");
  act(be, q, "attention_blocks", "q");
  same(q, {{k, "k"}, {v, "v"}}, "attention_blocks");
  H3_ASSERT(blocks > 0 && head_dim > 0 && q.ndim() == 2 && k.shape() == q.shape() && v.shape() == q.shape() &&
                q.dim(0) % blocks == 0 && q.dim(1) % head_dim == 0,
            "attention_blocks: q {} k {} v {} head_dim {} in {} blocks", q.describe(), k.describe(), v.describe(),
            head_dim, blocks);
  return H3_OP_CALL(be, attention_blocks, q, k, v, head_dim, blocks);
}

}  // namespace h3::ops

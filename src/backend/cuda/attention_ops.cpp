// The attention family's CUDA entries (ops/attention.h): full attention in bf16, f32 or FP8, its FP8-output form,
// causal attention with grouped KV heads and block-diagonal attention, through the kernels and cuDNN graphs of
// backend/cuda/attention/.
#include <cstddef>

#include "backend/cuda/attention/attention.h"
#include "backend/cuda/attention/causal.h"
#include "backend/cuda/common.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

namespace {

// q, k, v fp8 e4m3 with per-tensor scales (v also bf16) -> bf16, or fp8 O with its scale: our FP8 wgmma kernel
// (with f16 scores where q's and k's head norm bounds allow: |q . k| <= |q| |k|), else the bf16 attention of the
// dequantized values. The backend's Numerics::fp8_attention: off always takes the bf16
// route; require makes it an error where our kernel cannot run (tests, benchmarks: a silent fallback would hide it).
Tensor attention_fp8_op(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d, bool fp8_out) {
  const Fp8Attention mode = numerics().fp8_attention;
  const int64_t nq = q.dim(0), nk = k.dim(0), cols = q.dim(1);
  const double score_bound = static_cast<double>(q.head_norm_bound()) * k.head_norm_bound();
  if (mode != Fp8Attention::off) {
    Tensor o = Tensor::empty(fp8_out ? DType::fp8_e4m3 : DType::bf16, q.shape(), Device::cuda);
    Tensor ds = fp8_out ? Tensor::empty(DType::f32, {1}, Device::cuda) : Tensor();
    bool ran = false;
    if (v.dtype() == DType::bf16) {
      // bf16 v with fp8 q and k: quantized per tensor inside our kernel's V transpose.
      Tensor vs = Tensor::empty(DType::f32, {1}, Device::cuda);
      ran = cuda::attention_fp8_ours_bf16_v(q.raw(), k.raw(), v.raw(), fp8_scale(q), fp8_scale(k),
                                            static_cast<float*>(vs.raw()), o.raw(), fp8_out,
                                            static_cast<float*>(ds.raw()), nq, nk, cols / d, d, score_bound);
    } else {
      ran = cuda::attention_fp8_ours(q.raw(), k.raw(), v.raw(), fp8_scale(q), fp8_scale(k), fp8_scale(v), o.raw(),
                                     fp8_out, static_cast<float*>(ds.raw()), nq, nk, cols / d, d, score_bound);
    }
    if (ran) return fp8_out ? o.with_scale(ds) : o;
    if (mode == Fp8Attention::require)
      fail(
          "attention: our FP8 attention kernel cannot run {} heads x {} x {} (d {}) here ({}) and FP8 attention is "
          "required (--fp8-attention / H3_ATTENTION_FP8=require; auto falls back to bf16 attention)",
          cols / d, nq, nk, d, cuda::attention_fp8_unsupported(nq, nk, cols / d, d));
  }
  Tensor out = Tensor::empty(DType::bf16, q.shape(), Device::cuda);
  Tensor qb = dequantize_fp8(q), kb = dequantize_fp8(k);
  Tensor vb = dequantize_fp8(v.dtype() == DType::bf16 ? quantize_fp8(v) : v);  // v's FP8 values, as above
  cuda::attention(qb.raw(), kb.raw(), vb.raw(), out.raw(), DType::bf16, nq, nk, cols / d, d);
  return out;
}

}  // namespace

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  if (q.dtype() == DType::fp8_e4m3) return attention_fp8_op(q, k, v, d, false);
  const int64_t nq = q.dim(0), nk = k.dim(0), cols = q.dim(1);
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  cuda::attention(q.raw(), k.raw(), v.raw(), out.raw(), q.dtype(), nq, nk, cols / d, d);
  return out;
}

// ops::attention_fp8_out: as attention on fp8 q/k (v fp8 or bf16), its result left in fp8 (per-tensor scale) when
// our kernel or cuDNN's graph gives an fp8 O, else bf16.
Tensor attention_fp8_out(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  return attention_fp8_op(q, k, v, d, true);
}

Tensor attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  H3_CHECK(d <= 256, "attention_causal on the GPU: head_dim {} (the kernel takes at most 256)", d);
  const int64_t heads = q.dim(1) / d, kv_heads = k.dim(1) / d;
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  H3_CUDA(cuda::attention_causal(q.raw(), k.raw(), v.raw(), out.raw(), elem_type(q.dtype()), q.dim(0), heads, kv_heads,
                                 d, stream()));
  return out;
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

}  // namespace h3::cuda::op

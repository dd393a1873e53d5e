// The attention family of the op API (ops/ops.h has the contract every op shares): softmax(q k^T / sqrt(D)) v per
// head, over all keys, causally, or within blocks of rows.
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// Full non-causal attention per head: q[Nq, H*D], k/v[Nk, H*D] -> [Nq, H*D], softmax scale 1/sqrt(D).
// Streams over key blocks with an online softmax: no Nq x Nk buffer. On the GPU, q/k/v may also be fp8 e4m3 with
// per-tensor scales (quantize_fp8), v also bf16: FP8 attention (bf16 result), or, where the FP8 kernel cannot run,
// bf16 attention of the dequantized values (the backend's Numerics::fp8_attention decides: GpuOptions).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim);
// attention() on fp8 q/k/v (GPU), the result left in fp8 e4m3 with a per-tensor scale when the backend's FP8 graph
// produces it that way (then it feeds an FP8 GEMM as it is), else bf16. v may also come in bf16: it is then
// quantized per tensor as quantize_fp8(v) would (the same bits), inside V's transpose where our kernel runs.
Tensor attention_fp8_out(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim);
// Causal attention with grouped KV heads: q[N, Hq*D], k/v[N, Hkv*D] (Hkv divides Hq; query head h reads KV head
// h / (Hq / Hkv)); row i attends to rows 0..i; softmax scale 1/sqrt(D).
Tensor attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim);
// Block-diagonal attention: q/k/v [blocks * n, H*D] hold `blocks` independent sequences of n rows each; block i's
// queries attend to block i's keys only. Each block is the same computation as attention() on its rows alone
// (bitwise), so stacking units for the linear layers never changes what attention sees.
Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks);

}  // namespace h3::ops

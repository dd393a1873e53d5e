// Non-causal multi-head attention on the GPU for q [nq, heads*d], k/v [nk, heads*d] (bf16), softmax scale
// 1/sqrt(d): our wgmma kernel (backend/cuda/attention/wgmma.h: head_dim 128 on sm_90a;
// H3_ATTENTION_BF16_KERNEL=auto|wgmma|cudnn), else cuDNN's fused SDPA when the build has cuDNN and it accepts the
// shape, else a plain kernel.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace h3::cuda {

void attention(const void* q, const void* k, const void* v, void* o, DType t, int64_t nq, int64_t nk, int64_t heads,
               int64_t d);
// `batch` independent attentions in one cuDNN SDPA call (its batch dimension): block b is rows [b * n, (b + 1) * n)
// of q, k, v and o, each [batch * n, heads * d] bf16; every (block, head) is computed alone, as attention() on the
// block's rows would. False (nothing written) when that is not available: not bf16, no cuDNN, H3_ATTENTION_SIMPLE,
// or cuDNN refuses the shape; the caller then runs attention() per block.
bool attention_batched(const void* q, const void* k, const void* v, void* o, DType t, int64_t batch, int64_t n,
                       int64_t heads, int64_t d);
// Which implementation attention() uses for bf16 at this shape ("h3-wgmma", "cudnn-sdpa" or "simple"), building
// the plan if needed.
std::string attention_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d);

// FP8 attention through our wgmma kernel (backend/cuda/attention/wgmma.h), the arguments as for attention_fp8 below: o
// bf16, or (o_fp8) e4m3 with its descale written to *o_descale (device). False, nothing written, when it does not run
// here or H3_ATTENTION_FP8_KERNEL=cudnn; then the caller takes cuDNN's FP8 graph.
bool attention_fp8_ours(const void* q8, const void* k8, const void* v8, const float* dq, const float* dk,
                        const float* dv, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk, int64_t heads,
                        int64_t d);
// The same with v bf16 [nk, heads * d], quantized per tensor on the way (its max |v| pass, then e4m3 inside V's
// transpose: the bits of quantize_fp8 without its e4m3 copy of v); v's scale is written to *v_scale (device).
bool attention_fp8_ours_bf16_v(const void* q8, const void* k8, const void* v, const float* dq, const float* dk,
                               float* v_scale, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk,
                               int64_t heads, int64_t d);
// "h3-wgmma-fp8" when attention_fp8_ours runs this shape, else "".
std::string attention_fp8_ours_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d);

// The output type the FP8 attention graph is built with: the first that cuDNN accepts (bf16, else fp8 + a dequantize),
// or only one of them. H3_ATTENTION_FP8_O=bf16|fp8 sets it for `any`.
enum class Fp8AttentionOut { any, bf16, fp8 };
// FP8 attention (backend/cuda/attention/cudnn_fp8.cpp): q [nq, heads*d], k/v [nk, heads*d] fp8 e4m3 with per-tensor f32
// descales on the device (value = stored * descale; each pointer 16-byte aligned), o bf16 [nq, heads*d], softmax scale
// 1/sqrt(d). Returns false when cuDNN
// refuses every FP8 graph for this shape (logged once with cuDNN's reasons; o may be partly written): the caller
// then runs the bf16 attention.
bool attention_fp8(const void* q, const void* k, const void* v, const float* descale_q, const float* descale_k,
                   const float* descale_v, void* o, int64_t nq, int64_t nk, int64_t heads, int64_t d,
                   Fp8AttentionOut out = Fp8AttentionOut::any);
// The same into fp8 e4m3 o8 [nq, heads*d] with its per-tensor descale written to *o8_descale (device), when cuDNN
// runs the fp8-O graph here; false otherwise (then the caller runs attention_fp8 into bf16). Saves the dequantize
// and the next FP8 GEMM's quantization of O.
bool attention_fp8_o8(const void* q, const void* k, const void* v, const float* descale_q, const float* descale_k,
                      const float* descale_v, void* o8, float* o8_descale, int64_t nq, int64_t nk, int64_t heads,
                      int64_t d);
// Builds every variant's operation graph for this shape without a GPU (no handle, no plan): "" when cuDNN finalizes
// all of them, else cuDNN's reasons. Catches wrong dims, strides, types or connections before a GPU run.
std::string attention_fp8_graph_check(int64_t nq, int64_t nk, int64_t heads, int64_t d);
// The amax outputs of the last FP8 attention call's last head group (diagnostics; waits for the stream): s = max
// of the softmax weights before their scale into fp8, o = max |O| before its scale (-1: none yet).
struct Fp8AttentionAmax {
  float s = -1, o = -1;
};
Fp8AttentionAmax attention_fp8_amax();
// "cudnn-fp8 (O bf16)", "cudnn-fp8 (O fp8 + dequantize)", ... or "refused", building the graph if needed.
std::string attention_fp8_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d,
                               Fp8AttentionOut out = Fp8AttentionOut::any);

}  // namespace h3::cuda

// Non-causal multi-head attention on the GPU, one path per kind (backend/cuda/attention/dispatch.cpp):
//   bf16: our wgmma kernel (backend/cuda/attention/wgmma.h: head_dim 128 on sm_90a), else cuDNN's fused SDPA where
//         the build has cuDNN and it accepts the shape (other head dims, other GPUs, the VAE's stacked units), else
//         the plain kernel;
//   f32:  the plain kernel (attention/simple.h: attention_simple; cuDNN's SDPA takes no f32);
//   fp8:  our FP8 wgmma kernel; where it cannot run, the caller runs the bf16 attention of the dequantized values.
// q [nq, heads*d], k/v [nk, heads*d], softmax scale 1/sqrt(d).
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace h3::cuda {

void attention(const void* q, const void* k, const void* v, void* o, DType t, int64_t nq, int64_t nk, int64_t heads,
               int64_t d);
// `batch` independent attentions in one cuDNN SDPA call (its batch dimension): block b is rows [b * n, (b + 1) * n)
// of q, k, v and o, each [batch * n, heads * d] bf16; every (block, head) is computed alone, as attention() on the
// block's rows would. False (nothing written) when that is not available: not bf16, no cuDNN, or cuDNN refuses the
// shape; the caller then runs attention() per block.
bool attention_batched(const void* q, const void* k, const void* v, void* o, DType t, int64_t batch, int64_t n,
                       int64_t heads, int64_t d);
// Which implementation attention() uses for bf16 at this shape ("h3-wgmma", "cudnn-sdpa" or "simple"), building
// the plan if needed.
std::string attention_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d);
// cuDNN's fused SDPA on bf16 q/k/v, whatever attention() would choose (tests compare our kernel with it). False,
// nothing written, without cuDNN or where it refuses the shape.
bool attention_cudnn(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                     int64_t d);

// FP8 attention through our wgmma kernel (backend/cuda/attention/wgmma.h): q8 [nq, heads*d], k8 / v8 [nk, heads*d]
// e4m3 with per-tensor f32 descales on the device (value = stored * descale), o bf16, or (o_fp8) e4m3 with its
// descale written to *o_descale (device). False, nothing written, when the kernel does not run here.
// score_bound: a bound on |q8 . k8| over every pair of rows and head (e4m3 units), 0 when unknown; at or below
// fp8_f16_score_bound() the scores are accumulated in f16 where that configuration pays at the shape
// (attention_fp8_takes_f16_scores).
bool attention_fp8_ours(const void* q8, const void* k8, const void* v8, const float* dq, const float* dk,
                        const float* dv, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk, int64_t heads,
                        int64_t d, double score_bound = 0);
float fp8_f16_score_bound();
// Whether attention_fp8_ours takes f16 scores for this bound and shape (backend/cuda/attention/wgmma.h).
bool attention_fp8_takes_f16_scores(double score_bound, int64_t nq, int64_t heads);
// The same with v bf16 [nk, heads * d], quantized per tensor on the way (its max |v| pass, then e4m3 inside V's
// transpose: the bits of quantize_fp8 without its e4m3 copy of v); v's scale is written to *v_scale (device).
bool attention_fp8_ours_bf16_v(const void* q8, const void* k8, const void* v, const float* dq, const float* dk,
                               float* v_scale, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk,
                               int64_t heads, int64_t d, double score_bound = 0);
// "h3-wgmma-fp8" when attention_fp8_ours runs this shape, else "".
std::string attention_fp8_ours_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d);
// Why our FP8 kernel does not run this shape here ("" when it does).
std::string attention_fp8_unsupported(int64_t nq, int64_t nk, int64_t heads, int64_t d);

}  // namespace h3::cuda

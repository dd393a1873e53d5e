// Our own Hopper attention kernels: non-causal softmax(q k^T / sqrt(d)) v for q [nq, ld], k/v [nk, ld],
// o [nq, ld] with head h in columns [h * 128, (h + 1) * 128), head_dim 128, f32 accumulation (FP8's S in f16 with
// f16_scores below); bf16 (backend/cuda/attention/wgmma_bf16.cu) and e4m3 (backend/cuda/attention/wgmma_fp8.cu).
// Tensor-memory-accelerator loads of key tiles (192 keys bf16, 224 FP8) into a two-stage ring (one producer thread),
// two consumer warpgroups of 64 query rows each (FP8 with f16 scores: three, over 128-key tiles) running warpgroup MMAs
// (S = Q K^T from shared memory, O += P V with P in registers), tile j's S issued together with tile j-1's P V, which
// then runs during tile j's softmax. Every (128-row query tile, head) is one CTA with a fixed key order, so a head's
// output does not depend on how many heads a call holds, on nq or on anything but its own q rows and k/v:
// deterministic. sm_90a only.
//
// No h3 headers here, so that the kernel and bench/attention_wgmma_check.cu build alone with nvcc.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

namespace h3::cuda {

// "" when attention_wgmma can run this call on the current device, else why not (for a log line and a
// fallback).
std::string attention_wgmma_unsupported(const void* q, const void* k, const void* v, const void* o, int64_t nq,
                                        int64_t nk, int64_t heads, int64_t d, int64_t ld);
// Enqueues the attention on `stream`; throws std::runtime_error when attention_wgmma_unsupported says no or a
// CUDA call fails. Key tiles of 192 keys.
void attention_wgmma(const void* q, const void* k, const void* v, void* o, int64_t nq, int64_t nk, int64_t heads,
                     int64_t d, int64_t ld, cudaStream_t stream);

// FP8 (backend/cuda/attention/wgmma_fp8.cu): q8 [nq, ld], k8 / v8 [nk, ld] e4m3 with per-tensor f32 descales on the
// device (value = stored * descale), ld = heads * 128. Writes V transposed into vt_scratch (ld x
// attention_wgmma_fp8_vt_cols(nk) bytes, 16-byte aligned), then o: bf16 [nq, ld], or (o_fp8) e4m3 [nq, ld] with
// its per-tensor descale (= dv) written to *o_descale. Softmax weights pass through e4m3 (scaled by 448). Key tiles
// of 224 keys; one CTA per SM takes the (128 query rows, head) work items in turn.
// f16_scores: S = q8 k8^T accumulated in f16 (three consumer warpgroups of 64 rows, 128-key tiles, ~4 % faster at
// 37,830 x 56 heads on an H100), for callers that guarantee |q8 . k8| <= kFp8F16ScoreBound for every pair of rows
// and head (e4m3 units; e.g. q and k RMS-normed with a fixed scale, by Cauchy-Schwarz): a larger score overflows f16.
std::string attention_wgmma_fp8_unsupported(const void* q8, const void* k8, const void* v8, const void* o, int64_t nq,
                                            int64_t nk, int64_t heads, int64_t d, int64_t ld);
int64_t attention_wgmma_fp8_vt_cols(int64_t nk);
// The V^T that attention_wgmma_fp8 writes first: vt[c, k0 + slot] = v8[k0 + key(slot), c] for each group of 32
// keys k0 (the keys of a group permuted so that S's accumulator is the P operand as it stands), zero past nk;
// cols % 64 == 0. Exposed for bench/attention_wgmma_check.
void attention_wgmma_fp8_transpose_v(const void* v8, void* vt, int64_t nk, int64_t cols, cudaStream_t stream);
// The same from bf16 v, quantized on the way: e4m3(v / s), s = max(*amax / 448, 1e-12) with amax = max|v| on the
// device (quantize_fp8's bits), s written to *scale_out (the attention's dv).
void attention_wgmma_fp8_transpose_quantize_v(const void* v, const float* amax, float* scale_out, void* vt, int64_t nk,
                                              int64_t cols, cudaStream_t stream);
// attention_wgmma_fp8's attention on a V^T already written by one of the two above.
void attention_wgmma_fp8_on_vt(const void* q8, const void* k8, const void* vt_scratch, const float* dq, const float* dk,
                               const float* dv, void* o, bool o_fp8, float* o_descale, int64_t nq, int64_t nk,
                               int64_t heads, int64_t d, int64_t ld, cudaStream_t stream, bool f16_scores = false);
void attention_wgmma_fp8(const void* q8, const void* k8, const void* v8, const float* dq, const float* dk,
                         const float* dv, void* vt_scratch, void* o, bool o_fp8, float* o_descale, int64_t nq,
                         int64_t nk, int64_t heads, int64_t d, int64_t ld, cudaStream_t stream,
                         bool f16_scores = false);
// Whether f16 scores pay at this shape on the current device: their work items are 192 query rows against 128, and
// one CTA an SM takes the items in turns, so where the last turn leaves SMs idle the smaller items can win despite the
// f16 kernel's ~4.5 % per row (an H100 at 14,908 rows x 7 heads: 879 TFLOPS with f16 scores against 924). Compares the
// rows an SM works through in each, over that factor.
bool attention_wgmma_fp8_f16_pays(int64_t nq, int64_t heads);
// The largest |q8 . k8| f16_scores takes: f16's largest finite value is 65,504; the rest is margin for the MMA's f16
// accumulation, which rounds as it sums.
constexpr float kFp8F16ScoreBound = 32768.f;

}  // namespace h3::cuda

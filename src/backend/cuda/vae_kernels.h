// The CUDA kernels behind the VAE decoders' ops (ops_conv.h, ops_vae.h): plain functions of pointers, sizes and a
// stream returning a CUDA error code. T is f32 or bf16 (ElemType), arithmetic in f32. Direct convolutions add their
// terms in the CPU backend's order (input channel, then tap), so f32 results differ from it by rounding only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

// LayerNorm over rows of `cols` (biased variance, two passes in f32); w, b (dtype t) may be null.
cudaError_t layer_norm(const void* x, const void* w, const void* b, void* y, ElemType t, int64_t rows, int64_t cols,
                       float eps, cudaStream_t s);
// Direct conv1d, x[B,C,L] w[O,C/groups,K] -> y[B,O,Lo] (zero padding `pad`), bias (dtype t) may be null.
cudaError_t conv1d_direct(const void* x, const void* w, const void* bias, void* y, ElemType t, int64_t B, int64_t C,
                          int64_t L, int64_t O, int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t dilation,
                          int64_t groups, cudaStream_t s);
// im2col for a groups=1 conv1d as a GEMM: cols[b*Lo + j, c*K + k] = x[b, c, j*stride + k*dilation - pad] (0 outside),
// so that rows = output positions and y_rows = cols * w[O, C*K]^T.
cudaError_t conv1d_im2col(const void* x, void* cols, ElemType t, int64_t B, int64_t C, int64_t L, int64_t K, int64_t Lo,
                          int64_t stride, int64_t pad, int64_t dilation, cudaStream_t s);
// y[b, o, j] = rows[b*Lo + j, o]: the GEMM's position-major result back to channels-first.
cudaError_t rows_to_channels(const void* rows, void* y, ElemType t, int64_t B, int64_t O, int64_t Lo, cudaStream_t s);
// Direct transposed conv1d (PyTorch semantics), x[B,C,L] w[C,O/groups,K] -> y[B,O,Lo].
cudaError_t conv_transpose1d(const void* x, const void* w, const void* bias, void* y, ElemType t, int64_t B, int64_t C,
                             int64_t L, int64_t O, int64_t K, int64_t Lo, int64_t stride, int64_t pad, int64_t groups,
                             cudaStream_t s);
// Pads the last dim of [rows, L] to [rows, left + L + right]; mode 0 zeros, 1 reflect, 2 replicate (ops::PadMode).
cudaError_t pad1d(const void* x, void* y, ElemType t, int64_t rows, int64_t L, int64_t left, int64_t right, int mode,
                  cudaStream_t s);
// out[r, c] = x[r, c] + y[r, c] * scale[c]; x, scale, out of type tx, y of type ty.
cudaError_t add_scaled(const void* x, const void* y, const void* scale, void* out, ElemType tx, ElemType ty,
                       int64_t rows, int64_t cols, cudaStream_t s);
// The ViT decoder's unpatchify (ops_vae.h has the index equation).
cudaError_t unpatchify3d(const void* y, void* out, ElemType t, int64_t tt, int64_t h, int64_t w, int64_t C, int64_t pt,
                         int64_t r, cudaStream_t s);
// SnakeBeta on x[B, C, L] (ops_vae.h), alpha/beta of type t.
cudaError_t snake_beta(const void* x, const void* alpha, const void* beta, void* y, ElemType t, int64_t B, int64_t C,
                       int64_t L, float gain, cudaStream_t s);
// y = min(hi, max(lo, x / divisor)).
cudaError_t divide_clamp(const void* x, void* y, ElemType t, int64_t n, float divisor, float lo, float hi,
                         cudaStream_t s);

// RMSNorm over groups of `group` channels of f32 x [rows, cols] times an f32 weight (may be null), stored as bf16:
// the arithmetic of backend/cuda/kernels.cu's rms_norm (same block shape and reduction order), rounded once at the
// store.
cudaError_t rms_norm_f32_to_bf16(const float* x, const float* w, void* y, int64_t rows, int64_t cols, int64_t group,
                                 float eps, cudaStream_t s);

// add_scaled (f32 x and scale, y f32 or bf16: sum = x + y * scale, stored) and rms_norm_f32_to_bf16 of that sum (into
// out) in one pass, bitwise the two calls. Groups of at most 1024 * kResidualNormMaxPer channels (else
// cudaErrorInvalidValue; the caller runs the two ops).
constexpr int kResidualNormMaxPer = 8;
cudaError_t add_scaled_rms_norm_to_bf16(const float* x, const void* y, ElemType ty, const float* scale, float* sum,
                                        const float* w, void* out, int64_t rows, int64_t cols, int64_t group, float eps,
                                        cudaStream_t s);

// The video decode's per-pixel stitch (ops_vae.h stitch_frames has the equations). Tiles are f32 [C, T, h_a, w_b],
// tile (a, b) at cur[a * cols + b] (prev: the previous chunk's, read only for frames with fade_e > 0). Output f32
// [C, n_frames, H, W]. Sizes are small (at most kStitchMaxAxis tiles per axis, kStitchMaxFrames frames per call), so
// everything travels by value in the kernel's parameters.
constexpr int kStitchMaxAxis = 16, kStitchMaxTiles = 64, kStitchMaxFrames = 24;
struct StitchArgs {
  const float* cur[kStitchMaxTiles];
  const float* prev[kStitchMaxTiles];
  int32_t rows = 0, cols = 0, channels = 0, cur_frames = 0, prev_frames = 0, height = 0, width = 0, n_frames = 0;
  int32_t row_size[kStitchMaxAxis], row_off[kStitchMaxAxis + 1], row_extent[kStitchMaxAxis];
  int32_t col_size[kStitchMaxAxis], col_off[kStitchMaxAxis + 1], col_extent[kStitchMaxAxis];
  int32_t frame[kStitchMaxFrames], prev_frame[kStitchMaxFrames], fade_p[kStitchMaxFrames], fade_e[kStitchMaxFrames];
};
cudaError_t stitch_frames(const StitchArgs& a, float* out, cudaStream_t s);

}  // namespace h3::cuda

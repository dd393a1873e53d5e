// The convolution family (backend/cuda/conv.cu): plain functions of pointers, sizes and a stream returning a CUDA
// error code; the backend's entries call them after the front door's checks. T is f32 or bf16 (ElemType), arithmetic
// in f32. Direct convolutions add their terms in the CPU backend's order (input channel, then tap), so f32 results
// differ from it by rounding only.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

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

}  // namespace h3::cuda

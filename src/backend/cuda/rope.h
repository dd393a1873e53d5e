// Rotate-half RoPE and the q/k head norm + RoPE (backend/cuda/rope.cu).
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/<family>_ops.cpp) call them after the front door's
// checks. T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
// intermediates exactly where the CPU backend's bf16 emulation does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

cudaError_t rope(const void* x, const void* cos, const void* sin, void* out, ElemType t, int64_t rows, int64_t cols,
                 int64_t rot, int64_t head_dim, bool bf16_steps, cudaStream_t s);
// Fused: n = round_T(rms_norm over each head of d channels * w[d]), then RoPE on its first `rot` channels.
cudaError_t qk_norm_rope(const void* x, const void* w, const void* cos, const void* sin, void* out, ElemType t,
                         int64_t rows, int64_t cols, int64_t d, int64_t rot, float eps, bool bf16_steps,
                         cudaStream_t s);

// The bf16 row kernels (backend/cuda/row.cuh) take rows of a width in 8s, 16-byte aligned buffers and rows of at most
// 16384 values, else return cudaErrorNotSupported (the caller then takes the generic kernels). A whole row is
// reduced in one thread block in an order fixed by the row width alone.
// qk_norm_rope for bf16 heads of 128 channels with rot % 16 == 0 (the rotate-half partners by warp shuffles), into
// bf16 `out`, or into fp8 e4m3 `out_fp8` = fp8(v / *fp8_scale) of the bf16 result v (a fixed per-tensor scale).
cudaError_t qk_norm_rope_d128(const void* x, const void* w, const void* cs, const void* sn, void* out, void* out_fp8,
                              const float* fp8_scale, int64_t rows, int64_t heads, int64_t rot, float eps,
                              bool bf16_steps, cudaStream_t s);
// ops::qk_norm_rope for bf16 heads of 64 channels (x, out [rows, heads * 64], w [64], cos/sin [rows, rot]) with
// 16-byte accesses: cudaErrorNotSupported unless rot % 16 == 0, rot <= 64 and every pointer is 16-byte aligned (the
// caller then runs the generic kernel). Same arithmetic as the generic kernel except the order of the sum of squares.
cudaError_t qk_norm_rope_d64(const void* x, const void* w, const void* cs, const void* sn, void* out, int64_t rows,
                             int64_t heads, int64_t rot, float eps, bool bf16_steps, cudaStream_t s);

}  // namespace h3::cuda

// The activations (backend/cuda/activations.cu): SiLU, SwiGLU, GELU and SnakeBeta.
// Launchers: plain functions of pointers, sizes and a stream that return a CUDA error code. They know nothing of
// tensors or of the model; the backend's entries (backend/cuda/<family>_ops.cpp) call them after the front door's
// checks. T is float or __nv_bfloat16 (the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
// intermediates exactly where the CPU backend's bf16 emulation does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/elem_type.h"

namespace h3::cuda {

cudaError_t silu(const void* x, void* out, ElemType t, int64_t n, cudaStream_t s);
cudaError_t swiglu(const void* u, void* out, ElemType t, int64_t rows, int64_t f, bool bf16_steps, cudaStream_t s);

// The bf16 row kernels (backend/cuda/row.cuh) take rows of a width in 8s, 16-byte aligned buffers and rows of at most
// 16384 values, else return cudaErrorNotSupported (the caller then takes the generic kernels). A whole row is
// reduced in one thread block in an order fixed by the row width alone.
// SwiGLU of bf16 u[rows, 2f] = [value | gate] into bf16 `out` and/or per-row FP8 `q` + `scales` (then one block
// per row). Fast exp and division (within 2 ulp of f32 before the bf16 rounding). With `amax` (bf16 `out` only,
// no `q`): *amax = max |out| over the whole output, as absmax would compute it, in the same pass (no caller since
// the per-tensor FP8 SwiGLU was measured slower than the per-row one; left so the kernel stays the measured code).
cudaError_t swiglu_bf16(const void* u, void* out, void* q, float* scales, int64_t rows, int64_t f, bool bf16_steps,
                        cudaStream_t s, float* amax = nullptr);

// GELU in f32, rounded once to T: tanh form 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) or the exact
// 0.5 x (1 + erf(x / sqrt(2))).
cudaError_t gelu(const void* x, void* out, ElemType t, int64_t n, bool tanh_form, cudaStream_t s);
// SnakeBeta on x[B, C, L] (ops/activation.h), alpha/beta of type t.
cudaError_t snake_beta(const void* x, const void* alpha, const void* beta, void* y, ElemType t, int64_t B, int64_t C,
                       int64_t L, float gain, cudaStream_t s);

}  // namespace h3::cuda

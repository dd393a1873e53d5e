// The CUDA backend's element-wise and row kernels: plain functions of pointers, sizes and a stream that return a
// CUDA error code. They know nothing of tensors or of the model; backend/cuda/ops.cpp checks shapes and dtypes first.
// T is float or __nv_bfloat16 (passed as the dtype tag `bf16`); arithmetic is f32, and `bf16_steps` rounds the
// intermediates exactly where the CPU backend's bf16 emulation does.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace h3::cuda {

enum class ElemType : uint8_t { f32, bf16, f64, fp8_e4m3, i32, i64 };

cudaError_t convert(const void* src, ElemType st, void* dst, ElemType dt, int64_t n, cudaStream_t s);
cudaError_t rms_norm(const void* x, const void* w, void* y, ElemType t, int64_t rows, int64_t cols, int64_t group,
                     float eps, cudaStream_t s);
cudaError_t modulate(const void* h, const void* shift, const void* scale, const int32_t* idx, void* out, ElemType t,
                     int64_t rows, int64_t cols, bool bf16_steps, cudaStream_t s);
cudaError_t gate_residual(const void* x, const void* gate, const int32_t* idx, const void* y, void* out, ElemType t,
                          int64_t rows, int64_t cols, bool bf16_steps, cudaStream_t s);
cudaError_t add(const void* x, const void* y, void* out, ElemType t, int64_t n, cudaStream_t s);
cudaError_t silu(const void* x, void* out, ElemType t, int64_t n, cudaStream_t s);
cudaError_t swiglu(const void* u, void* out, ElemType t, int64_t rows, int64_t f, bool bf16_steps, cudaStream_t s);
cudaError_t rope(const void* x, const void* cos, const void* sin, void* out, ElemType t, int64_t rows, int64_t cols,
                 int64_t rot, int64_t head_dim, bool bf16_steps, cudaStream_t s);
// Fused: n = round_T(rms_norm(x) * w) over whole rows, then modulate(n, shift, scale, idx) — one pass.
cudaError_t norm_modulate(const void* x, const void* w, const void* shift, const void* scale, const int32_t* idx,
                          void* out, ElemType t, int64_t rows, int64_t cols, float eps, bool bf16_steps,
                          cudaStream_t s);
// Fused: n = round_T(rms_norm over each head of d channels * w[d]), then RoPE on its first `rot` channels.
cudaError_t qk_norm_rope(const void* x, const void* w, const void* cos, const void* sin, void* out, ElemType t,
                         int64_t rows, int64_t cols, int64_t d, int64_t rot, float eps, bool bf16_steps,
                         cudaStream_t s);
// y = fp8(x / *scale) with a given scale (device f32); values beyond 448 * scale saturate.
cudaError_t quantize_fp8_fixed(const void* x, ElemType t, int64_t n, const float* scale, void* y, cudaStream_t s);
// Row kernels for bf16 rows (backend/cuda/row_kernels.cu); cols % 8 == 0, 16-byte aligned buffers, rows of at most
// 16384 values, else cudaErrorNotSupported (the caller then takes the generic kernels above). A whole row is reduced in
// one thread block in an order fixed by the row width alone.
// Fused gated residual + norm + modulation: when gate is given, x' = bf16 ? rb(x + rb(gate[idx] * y)) : x + ...,
// stored to x_out (else x' = x); then h = norm_modulate(x') into h (bf16) and/or h_fp8 with per-row scales
// h_scale[r] = round_up_pow2(max(max|h[r]| / 448, 1e-12)) (h_fp8[r] = fp8(h[r] / h_scale[r]) of the bf16 h), or
// with the one given per-tensor scale *h_fixed_scale (device).
cudaError_t residual_norm_modulate(const void* x, const void* gate, const void* y, const int32_t* idx, void* x_out,
                                   const void* w, const void* shift, const void* scale, void* h, void* h_fp8,
                                   float* h_scale, const float* h_fixed_scale, int64_t rows, int64_t cols, float eps,
                                   bool bf16_steps, cudaStream_t s);
// *out = max((sqrt(cols) * max|w| * max|1 + scale| + max|shift|) * 1.02 / 448, 1e-12) over w[cols] and the
// bf16 tables of table_elems values, rounded up to a power of two (residual_norm_modulate's FP8 bound, ops.h).
cudaError_t norm_fp8_bound(const void* w, int64_t cols, const void* shift, const void* scale, int64_t table_elems,
                           float* out, cudaStream_t s);
// Per-row FP8 e4m3 quantization of bf16 rows: q[r] = fp8(x[r] / scales[r]), scales[r] as above.
cudaError_t quantize_rows_fp8(const void* x, void* q, float* scales, int64_t rows, int64_t cols, cudaStream_t s);
// SwiGLU of bf16 u[rows, 2f] = [value | gate] into bf16 `out` and/or per-row FP8 `q` + `scales` (then one block
// per row). Fast exp and division (within 2 ulp of f32 before the bf16 rounding). With `amax` (bf16 `out` only,
// no `q`): *amax = max |out| over the whole output, as absmax would compute it, in the same pass.
cudaError_t swiglu_bf16(const void* u, void* out, void* q, float* scales, int64_t rows, int64_t f, bool bf16_steps,
                        cudaStream_t s, float* amax = nullptr);
// qk_norm_rope for bf16 heads of 128 channels with rot % 16 == 0 (the rotate-half partners by warp shuffles), into
// bf16 `out`, or into fp8 e4m3 `out_fp8` = fp8(v / *fp8_scale) of the bf16 result v (a fixed per-tensor scale).
cudaError_t qk_norm_rope_d128(const void* x, const void* w, const void* cs, const void* sn, void* out, void* out_fp8,
                              const float* fp8_scale, int64_t rows, int64_t heads, int64_t rot, float eps,
                              bool bf16_steps, cudaStream_t s);
// bf16 out[r][c] = q[r][c] * scales[r] for fp8 e4m3 rows q (per-tensor scales: dequantize_fp8).
cudaError_t dequantize_rows_fp8(const void* q, const float* scales, void* out, int64_t rows, int64_t cols,
                                cudaStream_t s);
// out[i] = scale[0] for i < n (a per-tensor FP8 scale widened to a per-row vector).
cudaError_t broadcast_scale(const float* scale, float* out, int64_t n, cudaStream_t s);
// out[i] = x[idx[i]] (gather) or out[idx[i]] = x[i] (scatter), rows of row_bytes (a multiple of 2).
cudaError_t gather_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s);
cudaError_t scatter_rows(const void* x, const int32_t* idx, void* out, int64_t n, int64_t row_bytes, cudaStream_t s);
// A plain flash-style attention (one warp per query row and head, online softmax in f32) for any sequence
// lengths: the fallback when cuDNN cannot run, and an independent check of it. q/k/v/o [rows, heads*d], d <= 256.
cudaError_t attention_simple(const void* q, const void* k, const void* v, void* o, ElemType t, int64_t nq, int64_t nk,
                             int64_t heads, int64_t d, cudaStream_t s);
// Procedural weights: out[i] = float(offset + (((splitmix64(base + i) >> 11) * 2^-53) * 2 - 1) * scale), computed in
// f64 exactly as io/procedural.cpp does on the host.
cudaError_t procedural(uint64_t base, double scale, double offset, float* out, int64_t n, cudaStream_t s);
// Largest |x| over n values into *amax (f32, device), for FP8 scaling.
cudaError_t absmax(const void* x, ElemType t, int64_t n, float* amax, cudaStream_t s);
// y = fp8(x / scale) with scale = max(amax / 448, tiny) read from device memory; writes the scale to *scale_out.
cudaError_t quantize_fp8(const void* x, ElemType t, int64_t n, const float* amax, void* y, float* scale_out,
                         cudaStream_t s);

// y = bf16(x * *scale) for fp8 e4m3 x and a device f32 scale: the dequantize of an FP8 result.
cudaError_t dequantize_fp8(const void* x, int64_t n, const float* scale, void* y, cudaStream_t s);
// The FP8 attention graph's device scalars from the value descale dv: scale_s = p_scale (P into fp8: 448, e4m3's
// largest value, for P <= 1), descale_s = 1 / p_scale, scale_o = 0.875 / dv (O into fp8: |o| <= max|v| <= 448 dv,
// with 1/8 headroom for the rounded softmax weights summing past 1), descale_o = dv / 0.875 (that fp8 O's descale).
cudaError_t attention_fp8_scales(const float* descale_v, float p_scale, float* scale_s, float* descale_s,
                                 float* scale_o, float* descale_o, cudaStream_t s);
}  // namespace h3::cuda

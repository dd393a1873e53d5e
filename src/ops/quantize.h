// The FP8 family of the op API: e4m3 quantization per tensor and per row, and back (ops/ops.h has the contract every
// op shares). An fp8 tensor carries its scale (Tensor::scale()): value = stored * scale.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace h3::ops {

// Per-tensor FP8 e4m3 quantization: q = fp8(w / s), s = max|w| / 448, returned with its scale (Tensor::scale()).
Tensor quantize_fp8(const Tensor& w);
// Per-row FP8 e4m3 quantization of x[N, C]: q[r] = fp8(x[r] / s[r]), s[r] = round_up_pow2(max(max|x[r]| / 448,
// 1e-12)) (a power of two, so the GPU divides as an exact multiply; e4m3 keeps its relative precision, the row's
// largest value lands in (224, 448]), returned with its [N] f32 scales (Tensor::scale()). Each row's bits depend on
// that row alone.
Tensor quantize_fp8_rows(const Tensor& x);
// FP8 e4m3 values q[N, C] with their scale (Tensor::scale(): per tensor [1] or per row [N]) dequantized to bf16,
// bf16(float(q) * s) rounded once from the f32 product (a stored FP8 checkpoint weight for a bf16 layer).
Tensor dequantize_fp8(const Tensor& q);

// How a fused producer hands its output to an FP8 GEMM: not quantized, per row (quantize_fp8_rows), or per tensor
// with a scale bounded from the op's own parameters (no pass over the data; see residual_norm_modulate in
// ops/norm.h).
enum class Fp8Out : uint8_t { none, rows, bound };

}  // namespace h3::ops

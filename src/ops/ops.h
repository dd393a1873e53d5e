// The backend-neutral op API used by model code: every op takes and returns h3::Tensor and dispatches on the tensor's
// device and dtype; the CPU backend (f32, f64) is the reference the other backends are checked against. Row-indexed
// ops take an i32 index tensor `idx` whose entry r names the table row used by activation row r. The ops come
// in families, one header each, named by what they compute; where two forms differ only in how they round, that is a
// parameter (NormRound, Sums, bf16_steps, Fp8Out):
//   gemm.h        linear (Sums), PinnedGemms
//   norm.h        rms_norm (NormRound), norm_modulate, residual_norm_modulate, add_scaled_rms_norm, layer_norm,
//                 group_norm_frames, weight_norm
//   rope.h        rope, qk_norm_rope (+ its FP8 output)
//   attention.h   attention (+ its FP8 output), attention_causal, attention_blocks
//   activation.h  silu, swiglu (+ per-row FP8), gelu_tanh, gelu_erf, snake_beta
//   conv.h        conv3d, pad3d, conv1d, conv_transpose1d, pad1d
//   elementwise.h add, modulate, gate_residual, add_scaled, divide_clamp, round_bf16_
//   layout.h      gather_rows, scatter_rows, columns, set_columns, slice_last, unpatchify3d, stitch_frames
//   quantize.h    quantize_fp8, quantize_fp8_rows, dequantize_fp8 (Fp8Out)
// Each family's shape and dtype checks sit once in src/ops/<family>.cpp (the front door), which calls the entry of
// the backend holding the op's first tensor (ops/backend_ops.h); each backend implements the family in one file (CPU:
// backend/cpu/<family>.cpp; CUDA: backend/cuda/<family>_ops.cpp over the kernels of <family>.cu + <family>.h).
#pragma once
#include "core/tensor.h"
#include "ops/activation.h"
#include "ops/attention.h"
#include "ops/conv.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/layout.h"
#include "ops/norm.h"
#include "ops/quantize.h"
#include "ops/rope.h"

namespace h3::ops {

// Procedural weights (io/procedural.h) generated on `device` (device backends; io/procedural.cpp makes the host
// ones): f32 values float(offset + u(base + i) * scale), u as io/procedural.h defines it.
Tensor procedural(uint64_t base, double scale, double offset, const Shape& shape, Device device);

// Memory of `device` in bytes (0 for the CPU or without a running device backend).
size_t device_total_bytes(Device device);
// The bytes h3's tensors may take on `device` (--max-device-memory, less what the CUDA context and libraries take:
// backend/budget.h) and the bytes they take now; 0 for the CPU or without a running device backend. The room left
// for a phase is their difference.
int64_t device_budget_bytes(Device device);
int64_t device_in_use_bytes(Device device);

}  // namespace h3::ops

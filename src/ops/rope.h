// The rotary-position family of the op API (ops/ops.h has the contract every op shares): rotate-half RoPE, and the
// per-head RMSNorm of the q/k projections fused with it.
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// Rotate-half RoPE on the first R channels of every head of x[N, heads*D], with cos/sin [N, R].
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16_steps);
// Fused: rope(round(rms_norm(x, w over each head of head_dim channels)), cos, sin), where round() rounds through bf16
// when bf16_steps (the released recipe stores the norm's output in bf16). One pass on the GPU.
Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                    const Tensor& sin, bool bf16_steps);
// qk_norm_rope, its (bf16-rounded) output quantized to fp8 e4m3 with a fixed per-tensor scale: q = fp8(v / s),
// s = scale[0] (a [1] f32 tensor), saturating beyond 448 s; the result carries s. One pass on the GPU.
Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                        const Tensor& sin, bool bf16_steps, const Tensor& scale);

}  // namespace h3::ops

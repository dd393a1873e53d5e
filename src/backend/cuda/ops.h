// The CUDA backend's entries (namespace h3::cuda::op), declared from the op list of ops/backend_ops.h with the public
// ops' parameters, after the front door (src/ops) has checked shapes and dtypes. One file of entries per op family
// (<family>_ops.cpp: gemm, norm, rope, attention, activations, conv, elementwise, layout, quantize), each calling the
// launchers of its kernel file pair (<family>.cu + <family>.h), cuBLASLt or cuDNN; ops.cpp puts them into the
// backend's table. Entries the CUDA backend lacks (conv3d, pad3d, group_norm_frames, weight_norm, rms_norm_via_f32)
// are declared here and defined nowhere. Activations are bf16 or f32 (attention also takes fp8 q/k/v); index tensors
// and parameters may sit in host memory or come in another dtype and are copied over / converted. Internal to
// src/backend/cuda.
#pragma once
#include "ops/backend_ops.h"

namespace h3::cuda::op {

H3_DECLARE_BACKEND_ENTRIES()

// The index as i32 on the GPU (host indices were range-checked by the front door).
Tensor index_on_gpu(const Tensor& idx);
// Leading-dimension rows of t (1 for a 0-D tensor).
inline int64_t row_count(const Tensor& t) {
  return t.ndim() ? t.dim(0) : 1;
}
// The per-tensor scale of an fp8 GPU tensor (value = stored * scale), as a device pointer.
inline const float* fp8_scale(const Tensor& t) {
  return static_cast<const float*>(t.scale()->raw());
}

}  // namespace h3::cuda::op

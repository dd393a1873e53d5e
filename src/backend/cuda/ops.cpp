// The CUDA backend's table (ops/backend_ops.h): its rules (f32 and bf16 activations, fp8 where an op says so, i32 or
// i64 indices, parameters converted and uploaded) and its entries (backend/cuda/ops.h: one file of entries per op
// family), registered when the backend starts (backend/cuda/runtime.cpp).
#include "backend/cuda/ops.h"
#include "backend/backend.h"
#include "backend/cuda/common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/procedural.h"

namespace h3::cuda {

namespace op {

// The index as i32 on the GPU (host indices were range-checked by the front door).
Tensor index_on_gpu(const Tensor& idx) {
  if (idx.on_device()) return idx.dtype() == DType::i32 ? idx : idx.to(DType::i32);
  Tensor h = idx.dtype() == DType::i32 ? idx : idx.to(DType::i32);
  return h.to_device(Device::cuda);
}

Tensor procedural(uint64_t base, double scale, double offset, const Shape& shape) {
  Tensor out = Tensor::empty(DType::f32, shape, Device::cuda);
  H3_CUDA(cuda::procedural(base, scale, offset, static_cast<float*>(out.raw()), out.numel(), stream()));
  return out;
}

}  // namespace op

void register_ops() {
  static ops::BackendOps t;
  t.name = "cuda";
  t.device = Device::cuda;
  t.float_types = ops::dtypes({DType::f32, DType::bf16});
  t.index_types = ops::dtypes({DType::i32, DType::i64});
  t.converts_params = true;
  t.fp8 = true;
  // Every op of H3_BACKEND_OPS but conv3d, pad3d, group_norm_frames, weight_norm and rms_norm_via_f32 (the video
  // encoder and the f64 reference paths run on the CPU).
#define H3_CUDA_SET(name) t.name = op::name;
  H3_CUDA_SET(linear)
  H3_CUDA_SET(linear_acc)
  H3_CUDA_SET(rms_norm)
  H3_CUDA_SET(rms_norm_to)
  H3_CUDA_SET(rms_norm_rounded)
  H3_CUDA_SET(norm_modulate)
  H3_CUDA_SET(residual_norm_modulate)
  H3_CUDA_SET(add_scaled_rms_norm)
  H3_CUDA_SET(layer_norm)
  H3_CUDA_SET(rope)
  H3_CUDA_SET(qk_norm_rope)
  H3_CUDA_SET(qk_norm_rope_fp8)
  H3_CUDA_SET(attention)
  H3_CUDA_SET(attention_fp8_out)
  H3_CUDA_SET(attention_causal)
  H3_CUDA_SET(attention_blocks)
  H3_CUDA_SET(silu)
  H3_CUDA_SET(swiglu)
  H3_CUDA_SET(swiglu_fp8_rows)
  H3_CUDA_SET(gelu_tanh)
  H3_CUDA_SET(gelu_erf)
  H3_CUDA_SET(snake_beta)
  H3_CUDA_SET(conv1d)
  H3_CUDA_SET(conv_transpose1d)
  H3_CUDA_SET(pad1d)
  H3_CUDA_SET(add)
  H3_CUDA_SET(modulate)
  H3_CUDA_SET(gate_residual)
  H3_CUDA_SET(add_scaled)
  H3_CUDA_SET(divide_clamp)
  H3_CUDA_SET(scatter_rows)
  H3_CUDA_SET(gather_rows)
  H3_CUDA_SET(columns)
  H3_CUDA_SET(set_columns)
  H3_CUDA_SET(slice_last)
  H3_CUDA_SET(unpatchify3d)
  H3_CUDA_SET(stitch_frames)
  H3_CUDA_SET(quantize_fp8)
  H3_CUDA_SET(quantize_fp8_rows)
  H3_CUDA_SET(dequantize_fp8)
  H3_CUDA_SET(procedural)
#undef H3_CUDA_SET
  t.total_bytes = gpu_total_bytes;
  t.budget_bytes = gpu_budget_bytes;
  t.in_use_bytes = [] { return static_cast<int64_t>(gpu_in_use_bytes()); };
  t.pin_gemms = pin_gemms;
  ops::register_backend(t);
}

}  // namespace h3::cuda

// The CPU backend's table (ops/backend_ops.h): the reference every other backend is checked against. It computes in
// f32 and f64 on host tensors, takes i32 indices, and needs every tensor of a call in one dtype.
#include "backend/cpu/ops.h"

namespace h3::ops {

namespace {

BackendOps make_cpu_table() {
  BackendOps t;
  t.name = "cpu";
  t.device = Device::cpu;
  t.float_types = dtypes({DType::f32, DType::f64});
  t.index_types = dtypes({DType::i32});
  t.converts_params = false;
  t.fp8 = false;
  // Every op of H3_BACKEND_OPS but the device ones (attention_fp8_out, procedural).
#define H3_CPU_SET(name) t.name = cpu::name;
  H3_CPU_SET(linear)
  H3_CPU_SET(linear_acc)
  H3_CPU_SET(rms_norm)
  H3_CPU_SET(rms_norm_to)
  H3_CPU_SET(rms_norm_rounded)
  H3_CPU_SET(rms_norm_via_f32)
  H3_CPU_SET(norm_modulate)
  H3_CPU_SET(residual_norm_modulate)
  H3_CPU_SET(add_scaled_rms_norm)
  H3_CPU_SET(layer_norm)
  H3_CPU_SET(group_norm_frames)
  H3_CPU_SET(weight_norm)
  H3_CPU_SET(rope)
  H3_CPU_SET(qk_norm_rope)
  H3_CPU_SET(qk_norm_rope_fp8)
  H3_CPU_SET(attention)
  H3_CPU_SET(attention_causal)
  H3_CPU_SET(attention_blocks)
  H3_CPU_SET(silu)
  H3_CPU_SET(swiglu)
  H3_CPU_SET(swiglu_fp8_rows)
  H3_CPU_SET(gelu_tanh)
  H3_CPU_SET(gelu_erf)
  H3_CPU_SET(snake_beta)
  H3_CPU_SET(conv3d)
  H3_CPU_SET(pad3d)
  H3_CPU_SET(conv1d)
  H3_CPU_SET(conv_transpose1d)
  H3_CPU_SET(pad1d)
  H3_CPU_SET(add)
  H3_CPU_SET(modulate)
  H3_CPU_SET(gate_residual)
  H3_CPU_SET(add_scaled)
  H3_CPU_SET(divide_clamp)
  H3_CPU_SET(round_bf16_)
  H3_CPU_SET(scatter_rows)
  H3_CPU_SET(gather_rows)
  H3_CPU_SET(columns)
  H3_CPU_SET(set_columns)
  H3_CPU_SET(slice_last)
  H3_CPU_SET(unpatchify3d)
  H3_CPU_SET(stitch_frames)
  H3_CPU_SET(quantize_fp8)
  H3_CPU_SET(quantize_fp8_rows)
  H3_CPU_SET(dequantize_fp8)
#undef H3_CPU_SET
  return t;
}

}  // namespace

const BackendOps& cpu_backend() {
  static const BackendOps table = make_cpu_table();
  return table;
}

}  // namespace h3::ops

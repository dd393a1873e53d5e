// The table through which the backend-neutral ops reach a device backend. The CPU implementations check their
// first tensor's device and forward here; a GPU backend fills the table when it starts (backend/cuda/ops.cpp).
// Each entry has the meaning documented in ops.h; device entries also accept i32 index tensors in host memory.
#pragma once
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace h3::ops {

struct StitchGrid;   // ops_vae.h
struct StitchFrame;  // ops_vae.h

struct DeviceOps {
  Tensor (*linear)(const Tensor& x, const Tensor& w, const Tensor* bias) = nullptr;
  Tensor (*rms_norm)(const Tensor& x, const Tensor* w, int64_t group, double eps) = nullptr;
  Tensor (*modulate)(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16) = nullptr;
  Tensor (*gate_residual)(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16) = nullptr;
  Tensor (*add)(const Tensor& x, const Tensor& y) = nullptr;
  Tensor (*silu)(const Tensor& x) = nullptr;
  Tensor (*swiglu)(const Tensor& u, bool bf16) = nullptr;
  Tensor (*rope)(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16) = nullptr;
  Tensor (*attention)(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) = nullptr;
  void (*scatter_rows)(Tensor& out, const Tensor& rows, const Tensor& idx) = nullptr;
  Tensor (*gather_rows)(const Tensor& x, const Tensor& idx) = nullptr;
  Tensor (*columns)(const Tensor& t, int64_t begin, int64_t end) = nullptr;
  void (*set_columns)(Tensor& dst, int64_t begin, const Tensor& src) = nullptr;
  Tensor (*quantize_fp8)(const Tensor& w) = nullptr;
  Tensor (*quantize_fp8_rows)(const Tensor& x) = nullptr;
  Tensor (*dequantize_fp8)(const Tensor& q) = nullptr;
  ResidualNorm (*residual_norm_modulate)(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                         const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                                         bool bf16, Fp8Out fp8) = nullptr;
  Tensor (*swiglu_fp8_rows)(const Tensor& u, bool bf16) = nullptr;
  Tensor (*swiglu_fp8)(const Tensor& u, bool bf16) = nullptr;
  Tensor (*attention_fp8_out)(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) = nullptr;
  Tensor (*qk_norm_rope_fp8)(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                             const Tensor& sin, bool bf16, const Tensor& scale) = nullptr;
  // Procedural weights (io/procedural.h) generated on the device: f32 values float(offset + u(base + i) * scale).
  Tensor (*procedural)(uint64_t base, double scale, double offset, const Shape& shape) = nullptr;
  Tensor (*norm_modulate)(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                          const Tensor& idx, bool bf16) = nullptr;
  Tensor (*qk_norm_rope)(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                         const Tensor& sin, bool bf16) = nullptr;
  // The VAE decoders' ops (ops_conv.h, ops_vae.h); backend/cuda/vae_ops.cpp fills them.
  Tensor (*layer_norm)(const Tensor& x, const Tensor* w, const Tensor* b, double eps) = nullptr;
  Tensor (*conv1d)(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t dilation,
                   int64_t groups) = nullptr;
  Tensor (*conv_transpose1d)(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad,
                             int64_t groups) = nullptr;
  Tensor (*pad1d)(const Tensor& x, int64_t left, int64_t right, int mode) = nullptr;  // mode: ops::PadMode
  Tensor (*add_scaled)(const Tensor& x, const Tensor& y, const Tensor& scale) = nullptr;
  Tensor (*unpatchify3d)(const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t channels, int64_t pt,
                         int64_t r) = nullptr;
  Tensor (*snake_beta)(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) = nullptr;
  Tensor (*slice_last)(const Tensor& x, int64_t begin, int64_t end) = nullptr;
  Tensor (*divide_clamp)(const Tensor& x, double divisor, double lo, double hi) = nullptr;
  Tensor (*rms_norm_to)(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) = nullptr;
  std::pair<Tensor, Tensor> (*add_scaled_norm_to)(const Tensor& x, const Tensor& y, const Tensor& scale,
                                                  const Tensor* w, int64_t group, double eps, DType out) = nullptr;
  Tensor (*attention_blocks)(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim,
                             int64_t blocks) = nullptr;
  Tensor (*stitch_frames)(const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const StitchGrid& g,
                          const std::vector<StitchFrame>& frames) = nullptr;
  // The Qwen3-VL towers' ops (ops_conv.h attention_causal, ops_act.h, ops_text.h); backend/cuda/text_ops.cpp fills
  // them.
  Tensor (*attention_causal)(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim) = nullptr;
  Tensor (*gelu_tanh)(const Tensor& x) = nullptr;
  Tensor (*gelu_erf)(const Tensor& x) = nullptr;
  Tensor (*rms_norm_rounded)(const Tensor& x, const Tensor& w, int64_t group, double eps) = nullptr;
  Tensor (*linear_acc)(const Tensor& x, const Tensor& w) = nullptr;
};

void register_device_ops(const DeviceOps& ops);
// The registered table; fails naming `op` when no device backend is running.
const DeviceOps& device_ops(const char* op);

}  // namespace h3::ops

// First line of every op: a tensor on a device goes to the device backend.
#define H3_DEVICE_DISPATCH(tensor, op, ...) \
  if ((tensor).on_device()) return ::h3::ops::device_ops(#op).op(__VA_ARGS__)

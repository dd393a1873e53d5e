// The FP8 family's CUDA entries (ops/quantize.h): per-tensor and per-row e4m3 quantization and its inverse
// (backend/cuda/quantize.h).

#include "backend/cuda/common.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quantize.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

Tensor quantize_fp8(const Tensor& w) {
  Tensor q = Tensor::empty(DType::fp8_e4m3, w.shape(), Device::cuda);
  Tensor amax = Tensor::empty(DType::f32, {1}, Device::cuda);
  Tensor scale = Tensor::empty(DType::f32, {1}, Device::cuda);
  H3_CUDA(absmax(w.raw(), elem_type(w.dtype()), w.numel(), static_cast<float*>(amax.raw()), stream()));
  H3_CUDA(cuda::quantize_fp8(w.raw(), elem_type(w.dtype()), w.numel(), static_cast<const float*>(amax.raw()), q.raw(),
                             static_cast<float*>(scale.raw()), stream()));
  return q.with_scale(scale);
}

Tensor quantize_fp8_rows(const Tensor& x) {
  // The kernel's limit (the front door checked the rest): whole 16-byte vectors of bf16 per row.
  H3_CHECK(x.dim(1) % 8 == 0,
           "quantize_fp8_rows: {} has {} columns; per-row FP8 on the GPU takes a multiple of 8 (keep such a layer in "
           "bf16, as the DiT's per-layer rule does)",
           x.describe(), x.dim(1));
  Tensor xb = x.dtype() == DType::bf16 ? x : x.to(DType::bf16);
  Tensor q = Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda);
  Tensor scales = Tensor::empty(DType::f32, {x.dim(0)}, Device::cuda);
  H3_CUDA(quantize_rows_fp8(xb.raw(), q.raw(), static_cast<float*>(scales.raw()), x.dim(0), x.dim(1), stream()));
  return q.with_scale(scales);
}

// An fp8 tensor with per-row scales [n] (or a per-tensor scale [1]) as bf16 values q * scale.
Tensor dequantize_fp8(const Tensor& q) {
  H3_ASSERT(q.on_device() && q.dtype() == DType::fp8_e4m3 && q.ndim() == 2 && q.scale(),
            "dequantize_rows: an fp8 [N, C] GPU tensor with scales needed, got {}", q.describe());
  const Tensor& sc = *q.scale();
  H3_ASSERT(sc.numel() == q.dim(0) || sc.numel() == 1, "dequantize_rows: {} scales for {}", sc.numel(), q.describe());
  Tensor out = Tensor::empty(DType::bf16, q.shape(), Device::cuda);
  if (sc.numel() == 1) {
    H3_CUDA(cuda::dequantize_fp8(q.raw(), q.numel(), static_cast<const float*>(sc.raw()), out.raw(), stream()));
    return out;
  }
  H3_CUDA(dequantize_rows_fp8(q.raw(), static_cast<const float*>(sc.raw()), out.raw(), q.dim(0), q.dim(1), stream()));
  return out;
}

}  // namespace h3::cuda::op

// The norm family's CUDA entries (ops/norm.h): RMSNorm in its roundings (backend/cuda/norm.h), RMSNorm + modulation
// and the fused residual + RMSNorm + modulation with its FP8 outputs, LayerNorm and the ViT decoder's residual + norm.
#include <utility>

#include "backend/cuda/common.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tensors.h"
#include "ops/norm.h"

namespace h3::cuda::op {

Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps) {
  const int64_t rows = row_count(x), cols = rows ? x.numel() / rows : 0;
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::rms_norm(x.raw(), w ? w->raw() : nullptr, y.raw(), elem_type(x.dtype()), rows, cols, group,
                         static_cast<float>(eps), stream()));
  return y;
}

Tensor rms_norm_rounded(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  const int64_t rows = x.ndim() ? x.dim(0) : 1, cols = rows ? x.numel() / rows : 0;
  const Tensor wd = on_gpu(w, x.dtype());
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::rms_norm_rounded(x.raw(), wd.raw(), y.raw(), elem_type(x.dtype()), rows, cols, group,
                                 static_cast<float>(eps), stream()));
  return y;
}

// f32 -> bf16 in one pass; any other pairing as the two steps it stands for.
Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  const bool fused =
      x.dtype() == DType::f32 && out == DType::bf16 && (!w || (w->on_device() && w->dtype() == DType::f32));
  if (!fused) {
    Tensor y = ops::rms_norm(x, w, group, eps);
    return y.dtype() == out ? y : y.to(out);
  }
  const int64_t cols = x.ndim() ? x.dim(-1) : 1, rows = cols ? x.numel() / cols : 0;
  Tensor y = Tensor::empty(DType::bf16, x.shape(), Device::cuda);
  H3_CUDA(rms_norm_f32_to_bf16(static_cast<const float*>(x.raw()), w ? static_cast<const float*>(w->raw()) : nullptr,
                               y.raw(), rows, cols, group, static_cast<float>(eps), stream()));
  return y;
}

Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf) {
  Tensor i = index_on_gpu(idx);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  if (x.dtype() == DType::bf16) {
    const cudaError_t e = cuda::residual_norm_modulate(x.raw(), nullptr, nullptr, i.data<int32_t>(), nullptr, w.raw(),
                                                       shift.raw(), scale.raw(), out.raw(), nullptr, nullptr, nullptr,
                                                       x.dim(0), x.dim(1), static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "norm_modulate: {}", cudaGetErrorString(e));
  }
  H3_CUDA(cuda::norm_modulate(x.raw(), w.raw(), shift.raw(), scale.raw(), i.data<int32_t>(), out.raw(),
                              elem_type(x.dtype()), x.dim(0), x.dim(1), static_cast<float>(eps), bf, stream()));
  return out;
}

ops::ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                         const Tensor& w, double eps, const Tensor& shift, const Tensor& scale, bool bf,
                                         ops::Fp8Out fp8) {
  const bool gated = gate.defined();
  const int64_t n = x.dim(0), c = x.ndim() == 2 ? x.dim(1) : 0;
  const bool q8 = fp8 != ops::Fp8Out::none, rows = fp8 == ops::Fp8Out::rows;
  ops::ResidualNorm out;
  if (x.dtype() == DType::bf16) {
    Tensor i = index_on_gpu(idx);
    out.x = gated ? Tensor::empty(DType::bf16, x.shape(), Device::cuda) : x;
    Tensor h = q8 ? Tensor() : Tensor::empty(DType::bf16, x.shape(), Device::cuda);
    Tensor q = q8 ? Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda) : Tensor();
    Tensor qs = q8 ? Tensor::empty(DType::f32, {rows ? n : 1}, Device::cuda) : Tensor();
    if (q8 && !rows)
      H3_CUDA(
          norm_fp8_bound(w.raw(), c, shift.raw(), scale.raw(), shift.numel(), static_cast<float*>(qs.raw()), stream()));
    const cudaError_t e = cuda::residual_norm_modulate(
        x.raw(), gated ? gate.raw() : nullptr, gated ? y.raw() : nullptr, i.data<int32_t>(),
        gated ? out.x.raw() : nullptr, w.raw(), shift.raw(), scale.raw(), q8 ? nullptr : h.raw(),
        q8 ? q.raw() : nullptr, rows ? static_cast<float*>(qs.raw()) : nullptr,
        q8 && !rows ? static_cast<const float*>(qs.raw()) : nullptr, n, c, static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) {
      out.h = q8 ? q.with_scale(qs) : h;
      return out;
    }
    H3_ASSERT(e == cudaErrorNotSupported, "residual_norm_modulate: {}", cudaGetErrorString(e));
  }
  out.x = gated ? gate_residual(x, gate, idx, y, bf) : x;
  out.h = norm_modulate(out.x, w, eps, shift, scale, idx, bf);
  H3_ASSERT(fp8 != ops::Fp8Out::bound,
            "residual_norm_modulate: the bounded FP8 output needs bf16 rows of a multiple "
            "of 8 values (got {})",
            x.describe());
  if (rows) out.h = quantize_fp8_rows(out.h);
  return out;
}

Tensor layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps) {
  const int64_t C = x.ndim() ? x.dim(-1) : 1, rows = C ? x.numel() / C : 0;
  const Tensor wd = w ? on_gpu(*w, x.dtype()) : Tensor(), bd = b ? on_gpu(*b, x.dtype()) : Tensor();
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::layer_norm(x.raw(), w ? wd.raw() : nullptr, b ? bd.raw() : nullptr, y.raw(), elem_type(x.dtype()), rows,
                           C, static_cast<float>(eps), stream()));
  return y;
}

// One pass for the decoder's case (f32 x, f32 or bf16 y, f32 scale and weight, bf16 out); the two ops otherwise.
std::pair<Tensor, Tensor> add_scaled_rms_norm(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                              int64_t group, double eps, DType out) {
  const int64_t cols = x.ndim() == 2 ? x.dim(1) : 0;
  const bool fused = x.dtype() == DType::f32 && out == DType::bf16 && x.ndim() == 2 && y.shape() == x.shape() &&
                     (y.dtype() == DType::f32 || y.dtype() == DType::bf16) && scale.numel() == cols && group > 0 &&
                     cols % group == 0 && group <= 1024 * kResidualNormMaxPer &&
                     (!w || (w->on_device() && w->dtype() == DType::f32 && w->numel() == group));
  if (!fused) {
    Tensor sum = add_scaled(x, y, scale);
    Tensor normed = rms_norm_to(sum, w, group, eps, out);
    return {std::move(sum), std::move(normed)};
  }
  const Tensor sd = on_gpu(scale, DType::f32);
  Tensor sum = Tensor::empty(DType::f32, x.shape(), Device::cuda);
  Tensor normed = Tensor::empty(DType::bf16, x.shape(), Device::cuda);
  H3_CUDA(add_scaled_rms_norm_to_bf16(static_cast<const float*>(x.raw()), y.raw(), elem_type(y.dtype()),
                                      static_cast<const float*>(sd.raw()), static_cast<float*>(sum.raw()),
                                      w ? static_cast<const float*>(w->raw()) : nullptr, normed.raw(), x.dim(0), cols,
                                      group, static_cast<float>(eps), stream()));
  return {std::move(sum), std::move(normed)};
}

}  // namespace h3::cuda::op

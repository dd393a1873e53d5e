// The RoPE family's CUDA entries (ops/rope.h): rotate-half RoPE and the q/k head norm + RoPE, in bf16 or FP8
// (backend/cuda/rope.h; the FP8 form's fallback quantizes with backend/cuda/quantize.h).

#include "backend/cuda/common.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quantize.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t d, bool bf) {
  const int64_t n = x.dim(0), cols = x.dim(1), r = cos.dim(1);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::rope(x.raw(), cos.raw(), sin.raw(), out.raw(), elem_type(x.dtype()), n, cols, r, d, bf, stream()));
  return out;
}

Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t d, double eps, const Tensor& cos, const Tensor& sin,
                    bool bf) {
  const int64_t n = x.dim(0), cols = x.dim(1), r = cos.dim(1);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  if (x.dtype() == DType::bf16 && d == 128) {
    const cudaError_t e = qk_norm_rope_d128(x.raw(), w.raw(), cos.raw(), sin.raw(), out.raw(), nullptr, nullptr, n,
                                            cols / d, r, static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "qk_norm_rope: {}", cudaGetErrorString(e));
  }
  if (x.dtype() == DType::bf16 && d == 64) {  // the video VAE decoder's heads
    const cudaError_t e = qk_norm_rope_d64(x.raw(), w.raw(), cos.raw(), sin.raw(), out.raw(), n, cols / d, r,
                                           static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "qk_norm_rope (d 64): {}", cudaGetErrorString(e));
  }
  H3_CUDA(cuda::qk_norm_rope(x.raw(), w.raw(), cos.raw(), sin.raw(), out.raw(), elem_type(x.dtype()), n, cols, d, r,
                             static_cast<float>(eps), bf, stream()));
  return out;
}

Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t d, double eps, const Tensor& cos, const Tensor& sin,
                        bool bf, const Tensor& scale) {
  Tensor s = scale.to_device(Device::cuda);
  const int64_t n = x.dim(0), cols = x.dim(1), r = cos.dim(1);
  if (x.dtype() == DType::bf16 && d == 128 && w.dtype() == DType::bf16 && cos.dtype() == DType::bf16 &&
      sin.dtype() == DType::bf16 && x.ndim() == 2 && cols % d == 0 && cos.dim(0) == n && sin.shape() == cos.shape()) {
    Tensor q = Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda);
    const cudaError_t e =
        qk_norm_rope_d128(x.raw(), w.raw(), cos.raw(), sin.raw(), nullptr, q.raw(), static_cast<const float*>(s.raw()),
                          n, cols / d, r, static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return q.with_scale(s);
    H3_ASSERT(e == cudaErrorNotSupported, "qk_norm_rope_fp8: {}", cudaGetErrorString(e));
  }
  // Any other shape: the bf16 op, then the fixed-scale quantization.
  Tensor v = qk_norm_rope(x, w, d, eps, cos, sin, bf);
  Tensor q = Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda);
  H3_CUDA(cuda::quantize_fp8_fixed(v.raw(), elem_type(v.dtype()), v.numel(), static_cast<const float*>(s.raw()),
                                   q.raw(), stream()));
  return q.with_scale(s);
}

}  // namespace h3::cuda::op

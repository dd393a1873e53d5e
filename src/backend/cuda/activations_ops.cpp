// The activations' CUDA entries (ops/activation.h): SiLU, SwiGLU (and its per-row FP8 form), GELU and SnakeBeta
// (backend/cuda/activations.h).

#include "backend/cuda/activations.h"
#include "backend/cuda/common.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

namespace {

Tensor gelu(const Tensor& x, bool tanh_form) {
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::gelu(x.raw(), out.raw(), elem_type(x.dtype()), x.numel(), tanh_form, stream()));
  return out;
}

}  // namespace

Tensor silu(const Tensor& x) {
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::silu(x.raw(), out.raw(), elem_type(x.dtype()), x.numel(), stream()));
  return out;
}

Tensor swiglu(const Tensor& u, bool bf) {
  const int64_t f = u.dim(1) / 2;
  Tensor out = Tensor::empty(u.dtype(), {u.dim(0), f}, Device::cuda);
  if (u.dtype() == DType::bf16) {
    const cudaError_t e = swiglu_bf16(u.raw(), out.raw(), nullptr, nullptr, u.dim(0), f, bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "swiglu: {}", cudaGetErrorString(e));
  }
  H3_CUDA(cuda::swiglu(u.raw(), out.raw(), elem_type(u.dtype()), u.dim(0), f, bf, stream()));
  return out;
}

Tensor swiglu_fp8_rows(const Tensor& u, bool bf) {
  const int64_t n = u.dim(0), f = u.dim(1) / 2;
  if (u.dtype() == DType::bf16) {
    Tensor q = Tensor::empty(DType::fp8_e4m3, {n, f}, Device::cuda);
    Tensor qs = Tensor::empty(DType::f32, {n}, Device::cuda);
    const cudaError_t e = swiglu_bf16(u.raw(), nullptr, q.raw(), static_cast<float*>(qs.raw()), n, f, bf, stream());
    if (e == cudaSuccess) return q.with_scale(qs);
    H3_ASSERT(e == cudaErrorNotSupported, "swiglu_fp8_rows: {}", cudaGetErrorString(e));
  }
  return quantize_fp8_rows(swiglu(u, bf));
}

Tensor gelu_tanh(const Tensor& x) {
  return gelu(x, true);
}

Tensor gelu_erf(const Tensor& x) {
  return gelu(x, false);
}

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
  const Tensor a = on_gpu(alpha, x.dtype()), b = on_gpu(beta, x.dtype());
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::snake_beta(x.raw(), a.raw(), b.raw(), y.raw(), elem_type(x.dtype()), x.dim(0), x.dim(1), x.dim(2),
                           static_cast<float>(gain), stream()));
  return y;
}

}  // namespace h3::cuda::op

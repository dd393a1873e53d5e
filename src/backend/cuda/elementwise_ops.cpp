// The element-wise family's CUDA entries (ops/elementwise.h): the AdaLN modulation, the gated residual, the sum, the
// LayerScale residual and the divide-and-clamp (backend/cuda/elementwise.h).

#include "backend/cuda/common.h"
#include "backend/cuda/elementwise.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/tensors.h"

namespace h3::cuda::op {

Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf) {
  Tensor i = index_on_gpu(idx);
  Tensor out = Tensor::empty(h.dtype(), h.shape(), Device::cuda);
  H3_CUDA(cuda::modulate(h.raw(), shift.raw(), scale.raw(), i.data<int32_t>(), out.raw(), elem_type(h.dtype()),
                         h.dim(0), h.dim(1), bf, stream()));
  return out;
}

Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf) {
  Tensor i = index_on_gpu(idx);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::gate_residual(x.raw(), gate.raw(), i.data<int32_t>(), y.raw(), out.raw(), elem_type(x.dtype()),
                              x.dim(0), x.dim(1), bf, stream()));
  return out;
}

Tensor add(const Tensor& x, const Tensor& y) {
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::add(x.raw(), y.raw(), out.raw(), elem_type(x.dtype()), x.numel(), stream()));
  return out;
}

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  const Tensor sd = on_gpu(scale, x.dtype());
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::add_scaled(x.raw(), y.raw(), sd.raw(), out.raw(), elem_type(x.dtype()), elem_type(y.dtype()), x.dim(0),
                           x.dim(1), stream()));
  return out;
}

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::divide_clamp(x.raw(), y.raw(), elem_type(x.dtype()), x.numel(), static_cast<float>(divisor),
                             static_cast<float>(lo), static_cast<float>(hi), stream()));
  return y;
}

}  // namespace h3::cuda::op

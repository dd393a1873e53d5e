// The front door of ops/conv.h: shapes and dtypes checked once, then the entry of the backend holding x
// (ops/backend_ops.h).
#include "ops/conv.h"

#include "ops/checks.h"

namespace h3::ops {

Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, std::array<int64_t, 3> stride) {
  const BackendOps& be = backend_of(x, "conv3d");
  act(be, x, "conv3d", "x");
  same(x, w, "conv3d", "w");
  H3_ASSERT(x.ndim() == 4 && w.ndim() == 5 && w.dim(1) == x.dim(0), "conv3d: x {} w {}", x.describe(), w.describe());
  H3_ASSERT(stride[0] > 0 && stride[1] > 0 && stride[2] > 0, "conv3d: strides {} {} {}", stride[0], stride[1],
            stride[2]);
  H3_ASSERT(x.dim(1) >= w.dim(2) && x.dim(2) >= w.dim(3) && x.dim(3) >= w.dim(4),
            "conv3d: input {} smaller than kernel {}", x.describe(), w.describe());
  if (bias) {
    same(x, *bias, "conv3d", "bias");
    H3_ASSERT(bias->numel() == w.dim(0), "conv3d: bias {} for {} outputs", bias->describe(), w.dim(0));
  }
  return H3_OP_CALL(be, conv3d, x, w, bias, stride);
}

Tensor pad3d(const Tensor& x, int64_t t_front, int64_t top, int64_t bottom, int64_t left, int64_t right, PadMode mode) {
  const BackendOps& be = backend_of(x, "pad3d");
  act(be, x, "pad3d", "x");
  H3_ASSERT(x.ndim() == 4 && t_front >= 0 && top >= 0 && bottom >= 0 && left >= 0 && right >= 0,
            "pad3d: x {} padded by {} / {} {} {} {}", x.describe(), t_front, top, bottom, left, right);
  if (mode == PadMode::reflect)
    H3_ASSERT(top < x.dim(2) && bottom < x.dim(2) && left < x.dim(3) && right < x.dim(3),
              "pad3d: reflect pad larger than the input {}", x.describe());
  if (mode == PadMode::replicate)
    H3_ASSERT(x.dim(2) > 0 && x.dim(3) > 0, "pad3d: replicate pad of an empty input {}", x.describe());
  return H3_OP_CALL(be, pad3d, x, t_front, top, bottom, left, right, mode);
}

Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t dilation,
              int64_t groups) {
  const BackendOps& be = backend_of(x, "conv1d");
  act(be, x, "conv1d", "x");
  param(be, x, w, "conv1d", "w");
  H3_ASSERT(x.ndim() == 3 && w.ndim() == 3, "conv1d: x {} w {}", x.describe(), w.describe());
  const int64_t C = x.dim(1), L = x.dim(2), O = w.dim(0), K = w.dim(2);
  H3_ASSERT(groups > 0 && C % groups == 0 && O % groups == 0 && w.dim(1) == C / groups && stride > 0 && dilation > 0,
            "conv1d: x {} w {} groups {} stride {} dilation {}", x.describe(), w.describe(), groups, stride, dilation);
  const int64_t span = (K - 1) * dilation + 1;
  H3_ASSERT(L + 2 * pad >= span, "conv1d: input {} shorter than the kernel span {}", x.describe(), span);
  if (bias) {
    param(be, x, *bias, "conv1d", "bias");
    H3_ASSERT(bias->numel() == O, "conv1d: bias {} for {} outputs", bias->describe(), O);
  }
  return H3_OP_CALL(be, conv1d, x, w, bias, stride, pad, dilation, groups);
}

Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad,
                        int64_t groups) {
  const BackendOps& be = backend_of(x, "conv_transpose1d");
  act(be, x, "conv_transpose1d", "x");
  param(be, x, w, "conv_transpose1d", "w");
  H3_ASSERT(
      x.ndim() == 3 && w.ndim() == 3 && w.dim(0) == x.dim(1) && groups > 0 && x.dim(1) % groups == 0 && stride > 0,
      "conv_transpose1d: x {} w {} groups {} stride {}", x.describe(), w.describe(), groups, stride);
  const int64_t O = w.dim(1) * groups, Lo = (x.dim(2) - 1) * stride - 2 * pad + w.dim(2);
  H3_ASSERT(Lo > 0 && pad >= 0, "conv_transpose1d: empty output for x {} w {} pad {}", x.describe(), w.describe(), pad);
  if (bias) {
    param(be, x, *bias, "conv_transpose1d", "bias");
    H3_ASSERT(bias->numel() == O, "conv_transpose1d: bias {} for {} outputs", bias->describe(), O);
  }
  return H3_OP_CALL(be, conv_transpose1d, x, w, bias, stride, pad, groups);
}

Tensor pad1d(const Tensor& x, int64_t left, int64_t right, PadMode mode) {
  const BackendOps& be = backend_of(x, "pad1d");
  act(be, x, "pad1d", "x");
  H3_ASSERT(x.ndim() >= 1 && left >= 0 && right >= 0, "pad1d: {} by {}/{}", x.describe(), left, right);
  const int64_t L = x.dim(-1);
  if (mode == PadMode::reflect)
    H3_ASSERT(left < L && right < L, "pad1d: reflect pad larger than the input {}", x.describe());
  if (mode == PadMode::replicate) H3_ASSERT(L > 0, "pad1d: replicate pad of an empty input {}", x.describe());
  return H3_OP_CALL(be, pad1d, x, left, right, mode);
}

}  // namespace h3::ops

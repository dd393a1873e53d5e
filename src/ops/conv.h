// The convolution family of the op API (ops/ops.h has the contract every op shares): the two VAEs' 3-D and 1-D
// convolutions and their padding, every output element computed by one thread with a fixed accumulation order (so
// results never depend on the thread count).
//
// Layouts (row-major):
//   video: x[C, T, H, W], conv3d weight w[O, C, kt, kh, kw]          (one video; the VAE runs batch 1)
//   audio: x[B, C, L],    conv1d weight w[O, C/groups, K],
//                         conv_transpose1d weight w[C, O/groups, K]  (PyTorch's layouts)
#pragma once
#include <array>

#include "core/tensor.h"

namespace h3::ops {

enum class PadMode { zeros, reflect, replicate };

// Valid (unpadded) 3-D convolution with strides (st, sh, sw):
//   y[o,t,h,w] = bias[o] + sum_{c,a,b,e} w[o,c,a,b,e] * x[c, t*st+a, h*sh+b, w*sw+e].
Tensor conv3d(const Tensor& x, const Tensor& w, const Tensor* bias, std::array<int64_t, 3> stride);
// Pads x[C,T,H,W]: `t_front` zero frames before the first frame, then `top/bottom/left/right` pixels with `mode`
// (reflect: x[-i] = x[i], replicate: x[-i] = x[0], zeros).
Tensor pad3d(const Tensor& x, int64_t t_front, int64_t top, int64_t bottom, int64_t left, int64_t right, PadMode mode);

// 1-D convolution of x[B,C,L] with zero padding `pad` on both sides:
//   y[b,o,j] = bias[o] + sum_{c in group(o), k} w[o,c',k] * x[b,c, j*stride + k*dilation - pad].
Tensor conv1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t dilation,
              int64_t groups);
// Transposed 1-D convolution (PyTorch semantics, output length (L-1)*stride - 2*pad + K):
//   y[b,o,i*stride + k - pad] += w[c,o',k] * x[b,c,i]  for c in the group of o.
Tensor conv_transpose1d(const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad,
                        int64_t groups);
// Pads the last dim of x[B,C,L] by `left` and `right` samples with `mode`.
Tensor pad1d(const Tensor& x, int64_t left, int64_t right, PadMode mode);

}  // namespace h3::ops

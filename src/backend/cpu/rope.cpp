// CPU reference entries of the RoPE family (ops/rope.h) in f32 and f64: rotate-half RoPE, and the q/k head norm +
// RoPE (and its FP8 form) as their parts.
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"

namespace h3::cpu {

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16) {
  const int64_t cols = x.dim(1), r = cos.dim(1), half = r / 2;
  auto run = [&]<typename T>(T) {
    const T* cp = cos.data<T>();
    const T* sp = sin.data<T>();
    return map_rows<T>(x, cols, [&](int64_t row, const T* in, T* o) {
      const T* c = cp + row * r;
      const T* s = sp + row * r;
      for (int64_t h = 0; h < cols; h += head_dim) {
        const T* xi = in + h;
        T* xo = o + h;
        for (int64_t j = 0; j < r; ++j) {
          T rot = j < half ? -xi[j + half] : xi[j - half];
          xo[j] = bf16 ? rb(rb(xi[j] * c[j]) + rb(rot * s[j])) : xi[j] * c[j] + rot * s[j];
        }
        for (int64_t j = r; j < head_dim; ++j) xo[j] = xi[j];
      }
    });
  };
  return x.dtype() == DType::f32 ? run(float{}) : run(double{});
}

Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                    const Tensor& sin, bool bf16) {
  Tensor n = rms_norm(x, &w, head_dim, eps);
  if (bf16) round_bf16_(n);
  return rope(n, cos, sin, head_dim, bf16);
}

Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                        const Tensor& sin, bool bf16, const Tensor& scale) {
  Tensor v = qk_norm_rope(x, w, head_dim, eps, cos, sin, bf16).to(DType::f32);
  if (!bf16) round_bf16_(v);  // the GPU quantizes the stored bf16 values
  const float s = scale.cpu().data<float>()[0];
  float* p = v.data<float>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] /= s;
  return v.to(DType::fp8_e4m3).with_scale(scale.cpu());
}

}  // namespace h3::cpu

// CPU reference entries of the FP8 family (ops/quantize.h): per-tensor and per-row e4m3 quantization and its inverse.
#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/cpu/ops.h"
#include "ops/fp8_bound.h"

namespace h3::cpu {

using ops::round_up_pow2;

Tensor quantize_fp8(const Tensor& w) {
  double amax = 0;
  for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::abs(w.get(i)));
  const float scale = std::max(static_cast<float>(amax) / 448.0f, 1e-12f);
  Tensor f = w.to(DType::f32);
  float* p = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] /= scale;
  return f.to(DType::fp8_e4m3).with_scale(Tensor::from(std::vector<float>{scale}, {1}));
}

Tensor quantize_fp8_rows(const Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1);
  Tensor f = x.to(DType::f32);
  float* p = f.data<float>();
  std::vector<float> scales(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0;
    for (int64_t j = 0; j < c; ++j) amax = std::max(amax, std::abs(p[r * c + j]));
    const float s = round_up_pow2(std::max(amax / 448.0f, 1e-12f));
    scales[static_cast<size_t>(r)] = s;
    for (int64_t j = 0; j < c; ++j) p[r * c + j] /= s;
  }
  return f.to(DType::fp8_e4m3).with_scale(Tensor::from(scales, {n}));
}

Tensor dequantize_fp8(const Tensor& q) {
  const Tensor s = q.scale()->cpu().to(DType::f32);
  const int64_t n = q.dim(0), c = q.dim(1);
  const auto* in = static_cast<const uint8_t*>(q.raw());
  Tensor f(DType::f32, q.shape());
  float* p = f.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    const float sc = s.data<float>()[s.numel() == 1 ? 0 : r];
    for (int64_t j = 0; j < c; ++j) p[r * c + j] = fp8e4m3_to_f32(in[r * c + j]) * sc;
  }
  return f.to(DType::bf16);
}

}  // namespace h3::cpu

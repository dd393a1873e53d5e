// CPU activations of ops_act.h (device tensors go to the GPU backend's).
#include <cmath>
#include <numbers>

#include "backend/cpu/checks.h"
#include "ops/device_ops.h"
#include "ops/ops_act.h"

namespace h3::ops {

namespace {

template <typename F>
Tensor map_elements(const Tensor& x, const char* op, F f) {
  cpu_checks::need_float(x, op, "x");
  Tensor out(x.dtype(), x.shape());
  auto run = [&]<typename T>(T) {
    const T* a = x.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = f(a[i]);
  };
  if (x.dtype() == DType::f32)
    run(float{});
  else
    run(double{});
  return out;
}

}  // namespace

Tensor gelu_tanh(const Tensor& x) {
  H3_DEVICE_DISPATCH(x, gelu_tanh, x);
  return map_elements(x, "gelu_tanh", []<typename T>(T v) {
    const T k = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
    const T inner = k * (v + static_cast<T>(0.044715) * v * v * v);
    return static_cast<T>(0.5) * v * (T(1) + std::tanh(inner));
  });
}

Tensor gelu_erf(const Tensor& x) {
  H3_DEVICE_DISPATCH(x, gelu_erf, x);
  return map_elements(x, "gelu_erf", []<typename T>(T v) {
    return static_cast<T>(0.5) * v * (T(1) + std::erf(v * static_cast<T>(std::numbers::sqrt2 / 2)));
  });
}

}  // namespace h3::ops

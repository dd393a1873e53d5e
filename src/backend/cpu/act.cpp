// CPU activations of ops_act.h (entries of the CPU backend's table).
#include <cmath>
#include <numbers>

#include "backend/cpu/ops.h"

namespace h3::cpu {

namespace {

template <typename F>
Tensor map_elements(const Tensor& x, F f) {
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
  return map_elements(x, []<typename T>(T v) {
    const T k = static_cast<T>(std::sqrt(2.0 / std::numbers::pi));
    const T inner = k * (v + static_cast<T>(0.044715) * v * v * v);
    return static_cast<T>(0.5) * v * (T(1) + std::tanh(inner));
  });
}

Tensor gelu_erf(const Tensor& x) {
  return map_elements(x, []<typename T>(T v) {
    return static_cast<T>(0.5) * v * (T(1) + std::erf(v * static_cast<T>(std::numbers::sqrt2 / 2)));
  });
}

}  // namespace h3::cpu

// CPU reference entries of the activations (ops/activation.h) in f32 and f64: SiLU, SwiGLU (and its per-row FP8
// form), GELU and SnakeBeta, one output element per input element.
#include <cmath>
#include <numbers>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"
#include "core/parallel.h"

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

Tensor silu(const Tensor& x) {
  Tensor out(x.dtype(), x.shape());
  auto run = [&]<typename T>(T) {
    const T* a = x.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] / (T(1) + std::exp(-a[i]));
  };
  if (x.dtype() == DType::f32)
    run(float{});
  else
    run(double{});
  return out;
}

Tensor swiglu(const Tensor& u, bool bf16) {
  const int64_t f = u.dim(1) / 2;
  auto run = [&]<typename T>(T) {
    return map_rows<T>(u, f, [&](int64_t, const T* in, T* o) {
      for (int64_t j = 0; j < f; ++j) {
        T g = in[f + j];
        T s = g / (T(1) + std::exp(-g));
        o[j] = bf16 ? rb(in[j] * rb(s)) : in[j] * s;
      }
    });
  };
  return u.dtype() == DType::f32 ? run(float{}) : run(double{});
}

Tensor swiglu_fp8_rows(const Tensor& u, bool bf16) {
  Tensor g = swiglu(u, bf16);
  if (!bf16) round_bf16_(g);
  return quantize_fp8_rows(g);
}

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

Tensor snake_beta(const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2);
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T>(T) {
    std::vector<T> fa(C), inv_b(C);
    for (int64_t c = 0; c < C; ++c) {
      fa[c] = std::exp(alpha.data<T>()[c]);
      inv_b[c] = T(1) / (std::exp(beta.data<T>()[c]) + T(1e-9));
    }
    const T g = T(gain);
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    parallel_for(B * C, [&](int64_t rb, int64_t re) {
      for (int64_t row = rb; row < re; ++row) {
        const int64_t c = row % C;
        for (int64_t j = 0; j < L; ++j) {
          const T u = g * xp[row * L + j];
          const T s = std::sin(fa[c] * u);
          yp[row * L + j] = u + inv_b[c] * (s * s);
        }
      }
    });
    return 0;
  });
  return y;
}

}  // namespace h3::cpu

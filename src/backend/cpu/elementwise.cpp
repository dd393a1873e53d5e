// CPU reference entries of the element-wise family (ops/elementwise.h) in f32 and f64: the AdaLN modulation, the
// gated residual, the sum, the LayerScale residual, the divide-and-clamp, and the bf16 rounding that emulates the
// released recipe.
#include <algorithm>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"
#include "core/parallel.h"

namespace h3::cpu {

namespace {

// Row r's row of a per-sample table [samples, c] (the AdaLN shift, scale and gate): idx[r] is r's sample.
template <typename T>
const T* sample_row(const Tensor& table, const Tensor& idx, int64_t r, int64_t c) {
  return table.data<T>() + idx.data<int32_t>()[r] * c;
}

}  // namespace

Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16) {
  const int64_t c = h.dim(1);
  auto run = [&]<typename T>(T) {
    return map_rows<T>(h, c, [&](int64_t r, const T* in, T* o) {
      const T* shr = sample_row<T>(shift, idx, r, c);
      const T* scr = sample_row<T>(scale, idx, r, c);
      for (int64_t j = 0; j < c; ++j) {
        if (bf16)
          o[j] = rb(rb(in[j] * rb(T(1) + scr[j])) + shr[j]);
        else
          o[j] = in[j] * (T(1) + scr[j]) + shr[j];
      }
    });
  };
  return h.dtype() == DType::f32 ? run(float{}) : run(double{});
}

Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16) {
  const int64_t c = x.dim(1);
  auto run = [&]<typename T>(T) {
    const T* yp = y.data<T>();
    return map_rows<T>(x, c, [&](int64_t r, const T* in, T* o) {
      const T* gr = sample_row<T>(gate, idx, r, c);
      const T* yr = yp + r * c;
      for (int64_t j = 0; j < c; ++j) o[j] = bf16 ? rb(in[j] + rb(gr[j] * yr[j])) : in[j] + gr[j] * yr[j];
    });
  };
  return x.dtype() == DType::f32 ? run(float{}) : run(double{});
}

Tensor add(const Tensor& x, const Tensor& y) {
  Tensor out(x.dtype(), x.shape());
  auto run = [&]<typename T>(T) {
    const T* a = x.data<T>();
    const T* b = y.data<T>();
    T* o = out.data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) o[i] = a[i] + b[i];
  };
  if (x.dtype() == DType::f32)
    run(float{});
  else
    run(double{});
  return out;
}

Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  Tensor out(x.dtype(), x.shape());
  const int64_t N = x.dim(0), C = x.dim(1);
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* sp = scale.data<T>();
    T* op = out.data<T>();
    parallel_for(
        N,
        [&](int64_t rb, int64_t re) {
          for (int64_t r = rb; r < re; ++r)
            for (int64_t c = 0; c < C; ++c) op[r * C + c] = xp[r * C + c] + yp[r * C + c] * sp[c];
        },
        16);
    return 0;
  });
  return out;
}

Tensor divide_clamp(const Tensor& x, double divisor, double lo, double hi) {
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    const T d = T(divisor), l = T(lo), h = T(hi);
    for (int64_t i = 0; i < x.numel(); ++i) yp[i] = std::min(h, std::max(l, xp[i] / d));
    return 0;
  });
  return y;
}

void round_bf16_(Tensor& x) {
  if (x.dtype() != DType::f32) return;
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = round_bf16(p[i]);
}

}  // namespace h3::cpu

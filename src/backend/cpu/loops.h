// Loops and conversions shared by the CPU backend's entry files: the f32/f64 dispatch, bf16 rounding emulation, a
// row-parallel map and a layer's typed pointers. Internal to src/backend/cpu.
#pragma once
#include "core/parallel.h"
#include "core/tensor.h"

namespace h3::cpu {

// f(float{}) for an f32 tensor, else f(double{}).
template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

// Rounds through bf16 (the released recipe's intermediate storage); the identity in f64, where bf16 is not emulated.
inline float rb(float v) {
  return round_bf16(v);
}
inline double rb(double v) {
  return v;
}

// out[N, out_cols] with f(r, row r of x, row r of out) run for every row, rows spread over the thread pool.
template <typename T, typename F>
Tensor map_rows(const Tensor& x, int64_t out_cols, F f) {
  const int64_t n = x.dim(0);
  Tensor out(x.dtype(), {n, out_cols});
  const T* in = x.data<T>();
  T* o = out.data<T>();
  const int64_t in_cols = n ? x.numel() / n : 0;
  parallel_for(
      n,
      [&](int64_t b, int64_t e) {
        for (int64_t r = b; r < e; ++r) f(r, in + r * in_cols, o + r * out_cols);
      },
      16);
  return out;
}

// A layer's data as T: input, weight and bias (null when absent), output.
template <typename T>
struct Data {
  const T* x;
  const T* w;
  const T* b;
  T* y;
};
template <typename T>
Data<T> data_of(const Tensor& x, const Tensor* w, const Tensor* b, Tensor& y) {
  return {x.data<T>(), w ? w->data<T>() : nullptr, b ? b->data<T>() : nullptr, y.data<T>()};
}

}  // namespace h3::cpu

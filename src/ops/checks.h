// The front door's argument checks (src/ops/*.cpp only): shapes and dtypes against the rules of the backend that
// runs the op (ops/backend_ops.h), and the call of its entry. Launcher side: never inside a loop over data.
#pragma once
#include <initializer_list>
#include <string>

#include "core/error.h"
#include "ops/backend_ops.h"

namespace h3::ops::check {

std::string dtype_list(uint32_t mask);

// The backend holding t (the op's first tensor).
inline const BackendOps& backend_of(const Tensor& t, const char* op) {
  return backend_for(t.device(), op);
}

// A tensor the op computes on: on the backend's device, of a float dtype the backend computes in.
void act(const BackendOps& be, const Tensor& t, const char* op, const char* what);
// A tensor that must match x exactly: x's dtype, on x's device.
void same(const Tensor& x, const Tensor& t, const char* op, const char* what);
// Several such tensors, each with its name: same(x, {{w, "w"}, {cos, "cos"}}, op).
struct Named {
  const Tensor& t;
  const char* what;
};
void same(const Tensor& x, std::initializer_list<Named> ts, const char* op);
// A parameter of x's op (weight, bias, per-channel table): x's dtype and device, or, on a backend that converts
// parameters, any float tensor (host or device) it converts to x's dtype on its device.
void param(const BackendOps& be, const Tensor& x, const Tensor& p, const char* op, const char* what);
// An index of n entries into `rows` rows: a dtype of be.index_types, on the backend's device or, where the backend
// copies host inputs over, in host memory; host entries in [0, rows).
void index(const BackendOps& be, const Tensor& idx, int64_t n, int64_t rows, const char* op);
// An fp8 e4m3 tensor with a per-tensor f32 scale ([1]) on its own device (quantize_fp8's output), on a backend
// that computes in fp8.
void fp8_per_tensor(const BackendOps& be, const Tensor& t, const char* op, const char* what);
// modulate's table rules (ops/elementwise.h, and the norms fused with it): shift/scale [R, C] for h [N, C].
void tables(const Tensor& h, const Tensor& shift, const Tensor& scale, const char* op);
// add_scaled's rules (ops/elementwise.h, and add_scaled_rms_norm): x [N, C], y x's shape (and dtype, or bf16 on an
// f32 x where the backend converts parameters), scale [C].
void add_scaled(const BackendOps& be, const Tensor& x, const Tensor& y, const Tensor& scale, const char* op);
// The width of a row: elements per leading index (1 for a 0-D tensor).
int64_t row_width(const Tensor& t);

// The backend's entry for `op`, or an error naming the op and the backend that lacks it.
template <typename F>
F entry(const BackendOps& be, F f, const char* op) {
  if (!f)
    fail("{}: the {} backend has no such op (got {} tensors); run it where it is implemented", op, be.name, be.name);
  return f;
}

// The front door of an op whose one rule is that its single input (named `what` in errors) is an activation of its
// backend: the check, then the backend's entry `Entry` (&BackendOps::silu, ...), named `op`.
template <auto Entry>
Tensor unary(const Tensor& x, const char* op, const char* what = "x") {
  const BackendOps& be = backend_of(x, op);
  act(be, x, op, what);
  return entry(be, be.*Entry, op)(x);
}

}  // namespace h3::ops::check

namespace h3::ops {
// The checks every front-door file uses, by their short names.
using check::act;
using check::backend_of;
using check::param;
using check::same;
}  // namespace h3::ops

// Calls backend `be`'s entry for op `name` with the given arguments (after the checks).
#define H3_OP_CALL(be, name, ...) ::h3::ops::check::entry((be), (be).name, #name)(__VA_ARGS__)

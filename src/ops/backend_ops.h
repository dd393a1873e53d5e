// The backend interface of the op API (after ggml's ggml_backend_i): one table of function pointers per backend,
// one entry per op. The front door (src/ops/*.cpp) checks an op's shapes and dtypes once, against the rules of
// the backend that holds its first tensor (the fields below), then calls that backend's entry. Entries never
// re-check; they only refuse what their backend cannot do (a kernel's size limit), naming it.
//
// The CPU backend (backend/cpu) is always built and answers cpu_backend(); a device backend registers its table
// when it starts (backend/cuda/ops.cpp). An entry left null is an op that backend does not implement: the front
// door refuses it with the op and backend named. tests/ops/test_backend_ops.cpp runs every entry of H3_BACKEND_OPS on
// every backend present and fails for an entry without a test case.
#pragma once
#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "ops/ops.h"

namespace h3::ops {

using TensorPair = std::pair<Tensor, Tensor>;

// X(name, return type, (parameters)) for every op a backend implements, by family; the parameters are the public
// op's (ops/<family>.h), plus the stitch layouts the front door derives. A public op whose forms differ only in how
// they round is one entry per form, the front door picking it: ops::linear's Sums (linear, linear_acc) and
// ops::rms_norm's NormRound and output dtype (rms_norm, rms_norm_to, rms_norm_rounded for `twice`,
// rms_norm_via_f32 for the f32-in-f64 forms).
#define H3_BACKEND_OPS(X)                                                                                              \
  /* gemm.h */                                                                                                         \
  X(linear, Tensor, (const Tensor& x, const Tensor& w, const Tensor* bias))                                            \
  X(linear_acc, Tensor, (const Tensor& x, const Tensor& w))                                                            \
  /* norm.h */                                                                                                         \
  X(rms_norm, Tensor, (const Tensor& x, const Tensor* w, int64_t group, double eps))                                   \
  X(rms_norm_to, Tensor, (const Tensor& x, const Tensor* w, int64_t group, double eps, DType out))                     \
  X(rms_norm_rounded, Tensor, (const Tensor& x, const Tensor& w, int64_t group, double eps))                           \
  X(rms_norm_via_f32, Tensor, (const Tensor& x, const Tensor* w, int64_t group, double eps, NormRound round))          \
  X(norm_modulate, Tensor,                                                                                             \
    (const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale, const Tensor& idx,        \
     bool bf16))                                                                                                       \
  X(residual_norm_modulate, ResidualNorm,                                                                              \
    (const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, const Tensor& w, double eps,             \
     const Tensor& shift, const Tensor& scale, bool bf16, Fp8Out fp8))                                                 \
  X(add_scaled_rms_norm, TensorPair,                                                                                   \
    (const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w, int64_t group, double eps, DType out))    \
  X(layer_norm, Tensor, (const Tensor& x, const Tensor* w, const Tensor* b, double eps))                               \
  X(group_norm_frames, Tensor, (const Tensor& x, int64_t groups, const Tensor* w, const Tensor* b, double eps))        \
  X(weight_norm, Tensor, (const Tensor& g, const Tensor& v))                                                           \
  /* rope.h */                                                                                                         \
  X(rope, Tensor, (const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16))                \
  X(qk_norm_rope, Tensor,                                                                                              \
    (const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos, const Tensor& sin, bool bf16)) \
  X(qk_norm_rope_fp8, Tensor,                                                                                          \
    (const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos, const Tensor& sin, bool bf16,  \
     const Tensor& scale))                                                                                             \
  /* attention.h */                                                                                                    \
  X(attention, Tensor, (const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim))                          \
  X(attention_fp8_out, Tensor, (const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim))                  \
  X(attention_causal, Tensor, (const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim))                   \
  X(attention_blocks, Tensor, (const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks))   \
  /* activation.h */                                                                                                   \
  X(silu, Tensor, (const Tensor& x))                                                                                   \
  X(swiglu, Tensor, (const Tensor& u, bool bf16))                                                                      \
  X(swiglu_fp8_rows, Tensor, (const Tensor& u, bool bf16))                                                             \
  X(gelu_tanh, Tensor, (const Tensor& x))                                                                              \
  X(gelu_erf, Tensor, (const Tensor& x))                                                                               \
  X(snake_beta, Tensor, (const Tensor& x, const Tensor& alpha, const Tensor& beta, double gain))                       \
  /* conv.h */                                                                                                         \
  X(conv3d, Tensor, (const Tensor& x, const Tensor& w, const Tensor* bias, std::array<int64_t, 3> stride))             \
  X(pad3d, Tensor,                                                                                                     \
    (const Tensor& x, int64_t t_front, int64_t top, int64_t bottom, int64_t left, int64_t right, PadMode mode))        \
  X(conv1d, Tensor,                                                                                                    \
    (const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t dilation,              \
     int64_t groups))                                                                                                  \
  X(conv_transpose1d, Tensor,                                                                                          \
    (const Tensor& x, const Tensor& w, const Tensor* bias, int64_t stride, int64_t pad, int64_t groups))               \
  X(pad1d, Tensor, (const Tensor& x, int64_t left, int64_t right, PadMode mode))                                       \
  /* elementwise.h */                                                                                                  \
  X(add, Tensor, (const Tensor& x, const Tensor& y))                                                                   \
  X(modulate, Tensor, (const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16))       \
  X(gate_residual, Tensor, (const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16))       \
  X(add_scaled, Tensor, (const Tensor& x, const Tensor& y, const Tensor& scale))                                       \
  X(divide_clamp, Tensor, (const Tensor& x, double divisor, double lo, double hi))                                     \
  X(round_bf16_, void, (Tensor & x))                                                                                   \
  /* layout.h */                                                                                                       \
  X(scatter_rows, void, (Tensor & out, const Tensor& rows, const Tensor& idx))                                         \
  X(gather_rows, Tensor, (const Tensor& x, const Tensor& idx))                                                         \
  X(columns, Tensor, (const Tensor& t, int64_t begin, int64_t end))                                                    \
  X(set_columns, void, (Tensor & dst, int64_t begin, const Tensor& src))                                               \
  X(slice_last, Tensor, (const Tensor& x, int64_t begin, int64_t end))                                                 \
  X(unpatchify3d, Tensor, (const Tensor& y, int64_t t, int64_t h, int64_t w, int64_t channels, int64_t pt, int64_t r)) \
  X(stitch_frames, Tensor,                                                                                             \
    (const std::vector<Tensor>& cur, const std::vector<Tensor>& prev, const StitchGrid& grid,                          \
     const std::vector<StitchFrame>& frames, const StitchLayout& layout, const StitchLayout& prev_layout))             \
  /* quantize.h */                                                                                                     \
  X(quantize_fp8, Tensor, (const Tensor& w))                                                                           \
  X(quantize_fp8_rows, Tensor, (const Tensor& x))                                                                      \
  X(dequantize_fp8, Tensor, (const Tensor& q))                                                                         \
  /* ops.h */                                                                                                          \
  X(procedural, Tensor, (uint64_t base, double scale, double offset, const Shape& shape))

// Declares a backend's entries in the namespace it is used in: ret name(params) for every op of H3_BACKEND_OPS, with
// the op API's types in scope (backend/cpu/ops.h, backend/cuda/ops.h; an entry a backend lacks is declared and
// defined nowhere).
#define H3_DECLARE_BACKEND_ENTRIES() \
  using ::h3::ops::Fp8Out;           \
  using ::h3::ops::NormRound;        \
  using ::h3::ops::PadMode;          \
  using ::h3::ops::ResidualNorm;     \
  using ::h3::ops::StitchAxis;       \
  using ::h3::ops::StitchFrame;      \
  using ::h3::ops::StitchGrid;       \
  using ::h3::ops::StitchLayout;     \
  using ::h3::ops::TensorPair;       \
  H3_BACKEND_OPS(H3_DECLARE_BACKEND_ENTRY)
#define H3_DECLARE_BACKEND_ENTRY(name, ret, params) ret name params;

// A set of dtypes, one bit per DType.
constexpr uint32_t dtype_bit(DType t) {
  return uint32_t{1} << static_cast<unsigned>(t);
}
constexpr uint32_t dtypes(std::initializer_list<DType> ts) {
  uint32_t m = 0;
  for (DType t : ts) m |= dtype_bit(t);
  return m;
}

struct BackendOps {
  const char* name = "";  // "cpu", "cuda": names the backend in errors
  Device device = Device::cpu;
  uint32_t float_types = 0;  // dtypes the float ops compute in (cpu: f64, f32; cuda: f32, bf16)
  uint32_t index_types = 0;  // dtypes of row-index tensors (cpu: i32; cuda: i32, i64)
  // Whether parameters (weights, biases, tables of the ops that say so) of another float dtype, or in host memory,
  // are taken and converted/uploaded by the backend. Without it every tensor of a call shares x's dtype and device.
  bool converts_params = false;
  // Whether fp8 e4m3 tensors with their scales (Tensor::scale()) are computed on: FP8 GEMM weights and activations,
  // FP8 attention.
  bool fp8 = false;

#define H3_OP_ENTRY(name, ret, params) ret(*name) params = nullptr;
  H3_BACKEND_OPS(H3_OP_ENTRY)
#undef H3_OP_ENTRY

  // Device memory of the backend's device in bytes (0: not a device).
  size_t (*total_bytes)() = nullptr;
  // The device-memory budget its allocator may hold and the bytes it holds in use (0: not a device).
  int64_t (*budget_bytes)() = nullptr;
  int64_t (*in_use_bytes)() = nullptr;
  // Pinned GEMM choice (PinnedGemms in ops.h): +1 on entering a scope on this thread, -1 on leaving it.
  void (*pin_gemms)(int delta) = nullptr;
};

// The names of H3_BACKEND_OPS in order, and whether `ops` fills entry i.
inline constexpr const char* kOpNames[] = {
#define H3_OP_NAME(name, ret, params) #name,
    H3_BACKEND_OPS(H3_OP_NAME)
#undef H3_OP_NAME
};
inline constexpr size_t kOpCount = sizeof(kOpNames) / sizeof(kOpNames[0]);
bool has_entry(const BackendOps& ops, size_t i);

// The CPU backend's table (backend/cpu/table.cpp; always built).
const BackendOps& cpu_backend();
// Registers a device backend's table (the GPU backend, when it starts). The table must outlive the process.
void register_backend(const BackendOps& ops);
// The table of the backend holding tensors on `device`; fails naming `op` when no backend runs there.
const BackendOps& backend_for(Device device, const char* op);
// Whether a backend runs on `device` (the CPU always does).
bool backend_present(Device device);

}  // namespace h3::ops

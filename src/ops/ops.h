// The backend-neutral op API used by model code. Every op takes and returns h3::Tensor and dispatches on the
// tensor's device and dtype; the CPU backend (f32, f64) is the reference the other backends are checked against.
// Row-indexed ops take an i32 index tensor `idx` whose entry r names the table row used by activation row r.
#pragma once
#include "core/tensor.h"

namespace h3::ops {

// y[N,M] = x[N,K] * w[M,K]^T (+ bias[M]).
Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias = nullptr);
// Root-mean-square norm over groups of `group` consecutive channels (group = last dim for a whole-row norm,
// head_dim for per-head q/k norms); multiplies by w[group] when given.
Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps);
// h * (1 + scale[idx]) + shift[idx]; shift/scale are [R, C] tables.
Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16_steps);
// x + gate[idx] * y.
Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf16_steps);
// x + y.
Tensor add(const Tensor& x, const Tensor& y);
// silu(x) elementwise.
Tensor silu(const Tensor& x);
// SwiGLU on u[N, 2F] laid out [value; gate] along columns: out[N,F] = value * silu(gate).
Tensor swiglu(const Tensor& u, bool bf16_steps);
// Fused: modulate(round(rms_norm(x, w over whole rows)), shift, scale, idx), where round() rounds through bf16 when
// bf16_steps (the released recipe stores the norm's output in bf16). One pass on the GPU.
Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf16_steps);
// Fused: rope(round(rms_norm(x, w over each head of head_dim channels)), cos, sin), round() as above.
Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                    const Tensor& sin, bool bf16_steps);
// Rotate-half RoPE on the first R channels of every head of x[N, heads*D], with cos/sin [N, R].
Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16_steps);
// Full non-causal attention per head: q[Nq, H*D], k/v[Nk, H*D] -> [Nq, H*D], softmax scale 1/sqrt(D).
// Streams over key blocks with an online softmax: no Nq x Nk buffer. On the GPU, q/k/v may also be fp8 e4m3 with
// per-tensor scales (quantize_fp8), v also bf16: FP8 attention (bf16 result), or, where the FP8 kernel cannot run,
// bf16 attention of the dequantized values (the backend's Numerics::fp8_attention decides: GpuOptions).
Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim);
// out[idx[i]] = rows[i] (out must have the row width of rows).
void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx);
// out[i] = x[idx[i]].
Tensor gather_rows(const Tensor& x, const Tensor& idx);
// attention() on fp8 q/k/v (GPU), the result left in fp8 e4m3 with a per-tensor scale when the backend's FP8 graph
// produces it that way (then it feeds an FP8 GEMM as it is), else bf16. v may also come in bf16: it is then
// quantized per tensor as quantize_fp8(v) would (the same bits), inside V's transpose where our kernel runs.
Tensor attention_fp8_out(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim);
// Per-tensor FP8 e4m3 quantization: q = fp8(w / s), s = max|w| / 448, returned with its scale (Tensor::scale()).
Tensor quantize_fp8(const Tensor& w);
// Per-row FP8 e4m3 quantization of x[N, C]: q[r] = fp8(x[r] / s[r]), s[r] = round_up_pow2(max(max|x[r]| / 448,
// 1e-12)) (a power of two, so the GPU divides as an exact multiply; e4m3 keeps its relative precision, the row's
// largest value lands in (224, 448]), returned with its [N] f32 scales (Tensor::scale()). Each row's bits depend on
// that row alone.
Tensor quantize_fp8_rows(const Tensor& x);
// FP8 e4m3 values q[N, C] with their scale (Tensor::scale(): per tensor [1] or per row [N]) dequantized to bf16,
// bf16(float(q) * s) rounded once from the f32 product (a stored FP8 checkpoint weight for a bf16 layer).
Tensor dequantize_fp8(const Tensor& q);

// How a fused producer hands its output to an FP8 GEMM: not quantized, per row (quantize_fp8_rows), or per tensor
// with a scale bounded from the op's own parameters (no pass over the data; see residual_norm_modulate).
enum class Fp8Out : uint8_t { none, rows, bound };

// Fused gated residual, norm and modulation, one pass on the GPU:
//   x' = gate_residual(x, gate, idx, y, bf16_steps)   (x' = x when `gate` is undefined: Tensor())
//   h  = norm_modulate(x', w, eps, shift, scale, idx, bf16_steps), then for FP8 (of h's bf16 values):
//        rows:  quantize_fp8_rows(h)
//        bound: q = fp8(h / s) with one s = max((sqrt(C) * max|w| * max|1 + scale| + max|shift|) * 1.02 / 448,
//               1e-12) over every entry of w and the tables (|h| <= that bound for RMS-normed rows), in f32 in
//               that order, then rounded up to a power of two (fp8_bound.h): the same on any rows, any rank,
//               CPU or GPU.
// Bitwise the same as the separate ops.
struct ResidualNorm {
  Tensor x, h;
};
ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                    const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                                    bool bf16_steps, Fp8Out fp8 = Fp8Out::none);
// qk_norm_rope, its (bf16-rounded) output quantized to fp8 e4m3 with a fixed per-tensor scale: q = fp8(v / s),
// s = scale[0] (a [1] f32 tensor), saturating beyond 448 s; the result carries s. One pass on the GPU.
Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                        const Tensor& sin, bool bf16_steps, const Tensor& scale);
// quantize_fp8_rows(swiglu(u, bf16_steps)), one pass on the GPU.
Tensor swiglu_fp8_rows(const Tensor& u, bool bf16_steps);
// Rounds every element through bf16 in place (emulates the released bf16 recipe on the CPU).
void round_bf16_(Tensor& x);

// Procedural weights (io/procedural.h) generated on `device` (device backends; io/procedural.cpp makes the host
// ones): f32 values float(offset + u(base + i) * scale), u as io/procedural.h defines it.
Tensor procedural(uint64_t base, double scale, double offset, const Shape& shape, Device device);

// While one is alive, GEMMs that this thread issues on `device` choose their algorithm as deterministic mode does (one
// per weight shape, picked at a fixed reference row count, no split-K), so a row's result does not depend on how many
// rows are stacked with it. The video decode stacks several units per GEMM under it and stays bitwise equal to
// decoding the units one at a time (and so to any sharded split). Nests; a no-op on the CPU, whose GEMM order never
// depends on the row count.
class PinnedGemms {
 public:
  explicit PinnedGemms(Device device);
  ~PinnedGemms();
  PinnedGemms(const PinnedGemms&) = delete;
  PinnedGemms& operator=(const PinnedGemms&) = delete;

 private:
  Device device_;
};

// Memory of `device` in bytes (0 for the CPU or without a running device backend).
size_t device_total_bytes(Device device);
// The bytes h3's tensors may take on `device` (--max-device-memory, less what the CUDA context and libraries take:
// backend/budget.h) and the bytes they take now; 0 for the CPU or without a running device backend. The room left
// for a phase is their difference.
int64_t device_budget_bytes(Device device);
int64_t device_in_use_bytes(Device device);

}  // namespace h3::ops

namespace h3::ops {
// Columns [begin, end) of a 2-D tensor, as a new contiguous tensor.
Tensor columns(const Tensor& t, int64_t begin, int64_t end);
// dst[:, begin : begin + src.cols] = src.
void set_columns(Tensor& dst, int64_t begin, const Tensor& src);
}  // namespace h3::ops

// The GEMM family's CUDA entries (ops/gemm.h): linear in bf16, f32 or FP8 through cuBLASLt (backend/cuda/gemm.h), and
// linear_acc, the GEMM that keeps its f32 sums.
#include <map>
#include <mutex>
#include <tuple>

#include "backend/cuda/common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/ops.h"
#include "backend/cuda/quantize.h"
#include "backend/cuda/tensors.h"
#include "core/log.h"

namespace h3::cuda::op {

namespace {

// FP8 GEMM. Scales: the weight's is per tensor ([1]) or per output row ([m]); the activations' per tensor, or per
// row ([n], from quantize_fp8_rows or a fused producer). Any per-row operand makes the GEMM per-row on both sides
// (a per-tensor scale is widened); when cuBLASLt has no per-row algorithm, the activations are dequantized and
// quantized per tensor instead (slower, logged once).
Tensor linear_fp8(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t n = x.dim(0), m = w.dim(0), k = w.dim(1);
  H3_ASSERT(w.scale() && w.scale()->on_device() && w.scale()->dtype() == DType::f32 &&
                (w.scale()->numel() == 1 || w.scale()->numel() == m),
            "linear: an fp8 weight {} needs an f32 scale on the GPU, per tensor or per output row", w.describe());
  H3_ASSERT(m % 16 == 0 && k % 16 == 0,
            "linear: FP8 GEMMs need both weight dimensions to be multiples of 16 (got {}); keep this layer in bf16",
            w.describe());
  GemmArgs g;
  g.n = n, g.m = m, g.k = k;
  g.in = DType::fp8_e4m3, g.out = DType::bf16;
  g.bias = bias ? bias->raw() : nullptr;  // the probe below needs only whether there is one
  // Whether cuBLASLt scales rows for this weight shape (asked once per shape).
  auto rows_supported = [&] {
    static std::mutex mu;
    static std::map<std::tuple<int64_t, int64_t, bool>, bool> known;
    std::lock_guard lock(mu);
    const auto key = std::tuple{m, k, bias != nullptr};
    auto it = known.find(key);
    if (it != known.end()) return it->second;
    GemmArgs probe = g;
    probe.n = 16384;
    probe.row_scales = true;
    // cuBLASLt may refuse outer-vector scaling without scale vectors: any device floats will do for the question.
    probe.x_scale = probe.w_scale = static_cast<const float*>(w.scale()->raw());
    const bool ok = gemm_supported(probe);
    if (!ok)
      spdlog::warn("cuBLASLt has no per-row-scaled FP8 GEMM for {}x{} weights: per-tensor activation scales there", m,
                   k);
    return known.emplace(key, ok).first->second;
  };
  // Activations: quantized here unless the caller already did — per tensor, or per row in deterministic mode (a
  // per-tensor scale depends on which rows a rank holds). Per-row scales everywhere were slower in the whole FP8
  // forward (docs/notes.md, "2026-12-06 (rooms)").
  Tensor xq = x;
  const bool want_rows =
      x.dtype() == DType::fp8_e4m3 ? (x.scale() && x.scale()->numel() == n && n != 1) : numerics().fp8_row_scales();
  const bool row_ok = want_rows && rows_supported();
  if (x.dtype() != DType::fp8_e4m3)
    xq = row_ok ? quantize_fp8_rows(on_gpu(x, DType::bf16)) : quantize_fp8(on_gpu(x, DType::bf16));
  H3_ASSERT(xq.scale() && xq.scale()->on_device() && (xq.scale()->numel() == 1 || xq.scale()->numel() == n),
            "linear: fp8 activations {} carry no per-tensor or per-row scale", x.describe());
  if (!row_ok && xq.scale()->numel() != 1) xq = quantize_fp8(dequantize_fp8(xq));
  H3_ASSERT(w.scale()->numel() == 1 || rows_supported(),
            "linear: per-row FP8 weight scales need cuBLASLt's outer-vector scaling, which this cuBLASLt lacks for "
            "{}x{}; use a checkpoint with per-tensor scales",
            m, k);
  Tensor y = Tensor::empty(DType::bf16, {n, m}, Device::cuda);
  Tensor b = bias ? on_gpu(*bias, DType::bf16) : Tensor();
  g.w = w.raw();
  g.y = y.raw();
  g.bias = bias ? b.raw() : nullptr;
  g.row_scales = xq.scale()->numel() != 1 || w.scale()->numel() != 1;
  Tensor xs = *xq.scale(), ws = *w.scale();
  if (g.row_scales) {
    auto widen = [](const Tensor& s, int64_t count) {
      if (s.numel() == count) return s;
      Tensor v = Tensor::empty(DType::f32, {count}, Device::cuda);
      H3_CUDA(broadcast_scale(static_cast<const float*>(s.raw()), static_cast<float*>(v.raw()), count, stream()));
      return v;
    };
    xs = widen(xs, n);
    ws = widen(ws, m);
  }
  g.x = xq.raw();
  g.x_scale = static_cast<const float*>(xs.raw());
  g.w_scale = static_cast<const float*>(ws.raw());
  gemm(g);
  return y;
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  if (w.dtype() == DType::fp8_e4m3) return linear_fp8(x, w, bias);
  // The weight's dtype decides the arithmetic: bf16 layers in bf16, the released f32 layers in f32.
  const DType dt = w.dtype();
  Tensor xc = on_gpu(x, dt);
  Tensor b = bias ? on_gpu(*bias, dt) : Tensor();
  Tensor y = Tensor::empty(dt, {x.dim(0), w.dim(0)}, Device::cuda);
  GemmArgs g;
  g.x = xc.raw();
  g.w = w.raw();
  g.y = y.raw();
  g.bias = bias ? b.raw() : nullptr;
  g.n = x.dim(0), g.m = w.dim(0), g.k = w.dim(1);
  g.in = dt, g.out = dt;
  gemm(g);
  return y;
}

Tensor linear_acc(const Tensor& x, const Tensor& w) {
  const Tensor xc = on_gpu(x, w.dtype());
  Tensor y = Tensor::empty(DType::f32, {x.dim(0), w.dim(0)}, Device::cuda);
  GemmArgs g;
  g.x = xc.raw();
  g.w = w.raw();
  g.y = y.raw();
  g.n = x.dim(0), g.m = w.dim(0), g.k = w.dim(1);
  g.in = w.dtype(), g.out = DType::f32;
  gemm(g);
  return y;
}

}  // namespace h3::cuda::op

// The CUDA backend's entries for ops.h (its table: register_ops below): a kernel, cuBLASLt or cuDNN, the front door
// (src/ops) having checked shapes and dtypes. Activations are bf16 or f32 (attention also takes fp8 q/k/v); index
// tensors and parameters may sit in host memory or come in another dtype and are copied over / converted.
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/activations.h"
#include "backend/cuda/attention/attention.h"
#include "backend/cuda/common.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/modulate.h"
#include "backend/cuda/norm.h"
#include "backend/cuda/procedural.h"
#include "backend/cuda/quantize.h"
#include "backend/cuda/rope.h"
#include "backend/cuda/rows.h"
#include "backend/cuda/tensors.h"
#include "backend/cuda/vae_kernels.h"
#include "core/log.h"
#include "ops/backend_ops.h"

namespace h3::cuda {

void register_vae_ops(ops::BackendOps& t);   // backend/cuda/vae_ops.cpp
void register_text_ops(ops::BackendOps& t);  // backend/cuda/text_ops.cpp

namespace {

// The index as i32 on the GPU (host indices were range-checked by the front door).
Tensor index_on_gpu(const Tensor& idx) {
  if (idx.on_device()) return idx.dtype() == DType::i32 ? idx : idx.to(DType::i32);
  Tensor h = idx.dtype() == DType::i32 ? idx : idx.to(DType::i32);
  return h.to_device(Device::cuda);
}
int64_t row_count(const Tensor& t) {
  return t.ndim() ? t.dim(0) : 1;
}

Tensor quantize_fp8(const Tensor& w);
Tensor dequantize_rows(const Tensor& q);    // below
Tensor quantize_fp8_rows(const Tensor& x);  // below

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
  // per-tensor scale depends on which rows a rank holds). Per-row scales everywhere measured 1-2 % slower in the
  // whole FP8 forward on the H200 (0.934 / 3.915 s against 0.926 / 3.830 s at 480p / 768p).
  Tensor xq = x;
  const bool want_rows =
      x.dtype() == DType::fp8_e4m3 ? (x.scale() && x.scale()->numel() == n && n != 1) : numerics().fp8_row_scales();
  const bool row_ok = want_rows && rows_supported();
  if (x.dtype() != DType::fp8_e4m3)
    xq = row_ok ? quantize_fp8_rows(on_gpu(x, DType::bf16)) : quantize_fp8(on_gpu(x, DType::bf16));
  H3_ASSERT(xq.scale() && xq.scale()->on_device() && (xq.scale()->numel() == 1 || xq.scale()->numel() == n),
            "linear: fp8 activations {} carry no per-tensor or per-row scale", x.describe());
  if (!row_ok && xq.scale()->numel() != 1) xq = quantize_fp8(dequantize_rows(xq));
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

Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps) {
  const int64_t rows = row_count(x), cols = rows ? x.numel() / rows : 0;
  Tensor y = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::rms_norm(x.raw(), w ? w->raw() : nullptr, y.raw(), elem_type(x.dtype()), rows, cols, group,
                         static_cast<float>(eps), stream()));
  return y;
}

Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf) {
  Tensor i = index_on_gpu(idx);
  Tensor out = Tensor::empty(h.dtype(), h.shape(), Device::cuda);
  H3_CUDA(cuda::modulate(h.raw(), shift.raw(), scale.raw(), i.data<int32_t>(), out.raw(), elem_type(h.dtype()),
                         h.dim(0), h.dim(1), bf, stream()));
  return out;
}

Tensor gate_residual(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y, bool bf) {
  Tensor i = index_on_gpu(idx);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::gate_residual(x.raw(), gate.raw(), i.data<int32_t>(), y.raw(), out.raw(), elem_type(x.dtype()),
                              x.dim(0), x.dim(1), bf, stream()));
  return out;
}

Tensor add(const Tensor& x, const Tensor& y) {
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::add(x.raw(), y.raw(), out.raw(), elem_type(x.dtype()), x.numel(), stream()));
  return out;
}

Tensor silu(const Tensor& x) {
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::silu(x.raw(), out.raw(), elem_type(x.dtype()), x.numel(), stream()));
  return out;
}

Tensor swiglu(const Tensor& u, bool bf) {
  const int64_t f = u.dim(1) / 2;
  Tensor out = Tensor::empty(u.dtype(), {u.dim(0), f}, Device::cuda);
  if (u.dtype() == DType::bf16) {
    const cudaError_t e = swiglu_bf16(u.raw(), out.raw(), nullptr, nullptr, u.dim(0), f, bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "swiglu: {}", cudaGetErrorString(e));
  }
  H3_CUDA(cuda::swiglu(u.raw(), out.raw(), elem_type(u.dtype()), u.dim(0), f, bf, stream()));
  return out;
}

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t d, bool bf) {
  const int64_t n = x.dim(0), cols = x.dim(1), r = cos.dim(1);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  H3_CUDA(cuda::rope(x.raw(), cos.raw(), sin.raw(), out.raw(), elem_type(x.dtype()), n, cols, r, d, bf, stream()));
  return out;
}

// The per-tensor scale of an fp8 GPU tensor (value = stored * scale), as a device pointer.
const float* fp8_scale(const Tensor& t) {
  return static_cast<const float*>(t.scale()->raw());
}

// q, k, v fp8 e4m3 with per-tensor scales (v also bf16) -> bf16, or fp8 O with its scale: our FP8 wgmma kernel,
// else the bf16 attention of the dequantized values. The backend's Numerics::fp8_attention: off always takes the bf16
// route; require makes it an error where our kernel cannot run (tests, benchmarks: a silent fallback would hide it).
Tensor attention_fp8_op(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d, bool fp8_out) {
  const Fp8Attention mode = numerics().fp8_attention;
  const int64_t nq = q.dim(0), nk = k.dim(0), cols = q.dim(1);
  if (mode != Fp8Attention::off) {
    Tensor o = Tensor::empty(fp8_out ? DType::fp8_e4m3 : DType::bf16, q.shape(), Device::cuda);
    Tensor ds = fp8_out ? Tensor::empty(DType::f32, {1}, Device::cuda) : Tensor();
    bool ran = false;
    if (v.dtype() == DType::bf16) {
      // bf16 v with fp8 q and k: quantized per tensor inside our kernel's V transpose.
      Tensor vs = Tensor::empty(DType::f32, {1}, Device::cuda);
      ran = cuda::attention_fp8_ours_bf16_v(q.raw(), k.raw(), v.raw(), fp8_scale(q), fp8_scale(k),
                                            static_cast<float*>(vs.raw()), o.raw(), fp8_out,
                                            static_cast<float*>(ds.raw()), nq, nk, cols / d, d);
    } else {
      ran = cuda::attention_fp8_ours(q.raw(), k.raw(), v.raw(), fp8_scale(q), fp8_scale(k), fp8_scale(v), o.raw(),
                                     fp8_out, static_cast<float*>(ds.raw()), nq, nk, cols / d, d);
    }
    if (ran) return fp8_out ? o.with_scale(ds) : o;
    if (mode == Fp8Attention::require)
      fail(
          "attention: our FP8 attention kernel cannot run {} heads x {} x {} (d {}) here ({}) and FP8 attention is "
          "required (--fp8-attention / H3_ATTENTION_FP8=require; auto falls back to bf16 attention)",
          cols / d, nq, nk, d, cuda::attention_fp8_unsupported(nq, nk, cols / d, d));
  }
  Tensor out = Tensor::empty(DType::bf16, q.shape(), Device::cuda);
  Tensor qb = dequantize_rows(q), kb = dequantize_rows(k);
  Tensor vb = dequantize_rows(v.dtype() == DType::bf16 ? quantize_fp8(v) : v);  // v's FP8 values, as above
  cuda::attention(qb.raw(), kb.raw(), vb.raw(), out.raw(), DType::bf16, nq, nk, cols / d, d);
  return out;
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  if (q.dtype() == DType::fp8_e4m3) return attention_fp8_op(q, k, v, d, false);
  const int64_t nq = q.dim(0), nk = k.dim(0), cols = q.dim(1);
  Tensor out = Tensor::empty(q.dtype(), q.shape(), Device::cuda);
  cuda::attention(q.raw(), k.raw(), v.raw(), out.raw(), q.dtype(), nq, nk, cols / d, d);
  return out;
}

int64_t row_bytes_of(const Tensor& t) {
  int64_t w = 1;
  for (int i = 1; i < t.ndim(); ++i) w *= t.dim(i);
  return w * static_cast<int64_t>(dtype_size(t.dtype()));
}

void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx) {
  Tensor src = rows.to_device(Device::cuda);
  Tensor i = index_on_gpu(idx);
  H3_CUDA(cuda::scatter_rows(src.raw(), i.data<int32_t>(), out.raw(), rows.dim(0), row_bytes_of(out), stream()));
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  Shape s = x.shape();
  s[0] = idx.numel();
  Tensor out = Tensor::empty(x.dtype(), s, Device::cuda);
  Tensor i = index_on_gpu(idx);
  H3_CUDA(cuda::gather_rows(x.raw(), i.data<int32_t>(), out.raw(), idx.numel(), row_bytes_of(x), stream()));
  return out;
}

Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const size_t es = dtype_size(t.dtype());
  Tensor out = Tensor::empty(t.dtype(), {t.dim(0), end - begin}, Device::cuda);
  if (out.numel() == 0) return out;
  H3_CUDA(cudaMemcpy2DAsync(out.raw(), (end - begin) * es, static_cast<const std::byte*>(t.raw()) + begin * es,
                            t.dim(1) * es, (end - begin) * es, t.dim(0), cudaMemcpyDeviceToDevice, stream()));
  return out;
}

void set_columns(Tensor& dst, int64_t begin, const Tensor& src) {
  if (src.numel() == 0) return;
  const size_t es = dtype_size(dst.dtype());
  Tensor s = src.to_device(Device::cuda);
  H3_CUDA(cudaMemcpy2DAsync(static_cast<std::byte*>(dst.raw()) + begin * es, dst.dim(1) * es, s.raw(), src.dim(1) * es,
                            src.dim(1) * es, src.dim(0), cudaMemcpyDeviceToDevice, stream()));
}

Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf) {
  Tensor i = index_on_gpu(idx);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  if (x.dtype() == DType::bf16) {
    const cudaError_t e = residual_norm_modulate(x.raw(), nullptr, nullptr, i.data<int32_t>(), nullptr, w.raw(),
                                                 shift.raw(), scale.raw(), out.raw(), nullptr, nullptr, nullptr,
                                                 x.dim(0), x.dim(1), static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "norm_modulate: {}", cudaGetErrorString(e));
  }
  H3_CUDA(cuda::norm_modulate(x.raw(), w.raw(), shift.raw(), scale.raw(), i.data<int32_t>(), out.raw(),
                              elem_type(x.dtype()), x.dim(0), x.dim(1), static_cast<float>(eps), bf, stream()));
  return out;
}

Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t d, double eps, const Tensor& cos, const Tensor& sin,
                    bool bf) {
  const int64_t n = x.dim(0), cols = x.dim(1), r = cos.dim(1);
  Tensor out = Tensor::empty(x.dtype(), x.shape(), Device::cuda);
  if (x.dtype() == DType::bf16 && d == 128) {
    const cudaError_t e = qk_norm_rope_d128(x.raw(), w.raw(), cos.raw(), sin.raw(), out.raw(), nullptr, nullptr, n,
                                            cols / d, r, static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "qk_norm_rope: {}", cudaGetErrorString(e));
  }
  if (x.dtype() == DType::bf16 && d == 64) {  // the video VAE decoder's heads
    const cudaError_t e = qk_norm_rope_d64(x.raw(), w.raw(), cos.raw(), sin.raw(), out.raw(), n, cols / d, r,
                                           static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return out;
    H3_ASSERT(e == cudaErrorNotSupported, "qk_norm_rope (d 64): {}", cudaGetErrorString(e));
  }
  H3_CUDA(cuda::qk_norm_rope(x.raw(), w.raw(), cos.raw(), sin.raw(), out.raw(), elem_type(x.dtype()), n, cols, d, r,
                             static_cast<float>(eps), bf, stream()));
  return out;
}

// ops::attention_fp8_out: as attention on fp8 q/k (v fp8 or bf16), its result left in fp8 (per-tensor scale) when
// our kernel or cuDNN's graph gives an fp8 O, else bf16.
Tensor attention_fp8_out(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  return attention_fp8_op(q, k, v, d, true);
}

// An fp8 tensor with per-row scales [n] (or a per-tensor scale [1]) as bf16 values q * scale.
Tensor dequantize_rows(const Tensor& q) {
  H3_ASSERT(q.on_device() && q.dtype() == DType::fp8_e4m3 && q.ndim() == 2 && q.scale(),
            "dequantize_rows: an fp8 [N, C] GPU tensor with scales needed, got {}", q.describe());
  const Tensor& sc = *q.scale();
  H3_ASSERT(sc.numel() == q.dim(0) || sc.numel() == 1, "dequantize_rows: {} scales for {}", sc.numel(), q.describe());
  Tensor out = Tensor::empty(DType::bf16, q.shape(), Device::cuda);
  if (sc.numel() == 1) {
    H3_CUDA(dequantize_fp8(q.raw(), q.numel(), static_cast<const float*>(sc.raw()), out.raw(), stream()));
    return out;
  }
  H3_CUDA(dequantize_rows_fp8(q.raw(), static_cast<const float*>(sc.raw()), out.raw(), q.dim(0), q.dim(1), stream()));
  return out;
}

Tensor quantize_fp8_rows(const Tensor& x) {
  // The kernel's limit (the front door checked the rest): whole 16-byte vectors of bf16 per row.
  H3_CHECK(x.dim(1) % 8 == 0,
           "quantize_fp8_rows: {} has {} columns; per-row FP8 on the GPU takes a multiple of 8 (keep such a layer in "
           "bf16, as the DiT's per-layer rule does)",
           x.describe(), x.dim(1));
  Tensor xb = x.dtype() == DType::bf16 ? x : x.to(DType::bf16);
  Tensor q = Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda);
  Tensor scales = Tensor::empty(DType::f32, {x.dim(0)}, Device::cuda);
  H3_CUDA(quantize_rows_fp8(xb.raw(), q.raw(), static_cast<float*>(scales.raw()), x.dim(0), x.dim(1), stream()));
  return q.with_scale(scales);
}

ops::ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                         const Tensor& w, double eps, const Tensor& shift, const Tensor& scale, bool bf,
                                         ops::Fp8Out fp8) {
  const bool gated = gate.defined();
  const int64_t n = x.dim(0), c = x.ndim() == 2 ? x.dim(1) : 0;
  const bool q8 = fp8 != ops::Fp8Out::none, rows = fp8 == ops::Fp8Out::rows;
  ops::ResidualNorm out;
  if (x.dtype() == DType::bf16) {
    Tensor i = index_on_gpu(idx);
    out.x = gated ? Tensor::empty(DType::bf16, x.shape(), Device::cuda) : x;
    Tensor h = q8 ? Tensor() : Tensor::empty(DType::bf16, x.shape(), Device::cuda);
    Tensor q = q8 ? Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda) : Tensor();
    Tensor qs = q8 ? Tensor::empty(DType::f32, {rows ? n : 1}, Device::cuda) : Tensor();
    if (q8 && !rows)
      H3_CUDA(
          norm_fp8_bound(w.raw(), c, shift.raw(), scale.raw(), shift.numel(), static_cast<float*>(qs.raw()), stream()));
    const cudaError_t e = cuda::residual_norm_modulate(
        x.raw(), gated ? gate.raw() : nullptr, gated ? y.raw() : nullptr, i.data<int32_t>(),
        gated ? out.x.raw() : nullptr, w.raw(), shift.raw(), scale.raw(), q8 ? nullptr : h.raw(),
        q8 ? q.raw() : nullptr, rows ? static_cast<float*>(qs.raw()) : nullptr,
        q8 && !rows ? static_cast<const float*>(qs.raw()) : nullptr, n, c, static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) {
      out.h = q8 ? q.with_scale(qs) : h;
      return out;
    }
    H3_ASSERT(e == cudaErrorNotSupported, "residual_norm_modulate: {}", cudaGetErrorString(e));
  }
  out.x = gated ? gate_residual(x, gate, idx, y, bf) : x;
  out.h = norm_modulate(out.x, w, eps, shift, scale, idx, bf);
  H3_ASSERT(fp8 != ops::Fp8Out::bound,
            "residual_norm_modulate: the bounded FP8 output needs bf16 rows of a multiple "
            "of 8 values (got {})",
            x.describe());
  if (rows) out.h = quantize_fp8_rows(out.h);
  return out;
}

Tensor swiglu_fp8_rows(const Tensor& u, bool bf) {
  const int64_t n = u.dim(0), f = u.dim(1) / 2;
  if (u.dtype() == DType::bf16) {
    Tensor q = Tensor::empty(DType::fp8_e4m3, {n, f}, Device::cuda);
    Tensor qs = Tensor::empty(DType::f32, {n}, Device::cuda);
    const cudaError_t e = swiglu_bf16(u.raw(), nullptr, q.raw(), static_cast<float*>(qs.raw()), n, f, bf, stream());
    if (e == cudaSuccess) return q.with_scale(qs);
    H3_ASSERT(e == cudaErrorNotSupported, "swiglu_fp8_rows: {}", cudaGetErrorString(e));
  }
  return quantize_fp8_rows(swiglu(u, bf));
}

Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t d, double eps, const Tensor& cos, const Tensor& sin,
                        bool bf, const Tensor& scale) {
  Tensor s = scale.to_device(Device::cuda);
  const int64_t n = x.dim(0), cols = x.dim(1), r = cos.dim(1);
  if (x.dtype() == DType::bf16 && d == 128 && w.dtype() == DType::bf16 && cos.dtype() == DType::bf16 &&
      sin.dtype() == DType::bf16 && x.ndim() == 2 && cols % d == 0 && cos.dim(0) == n && sin.shape() == cos.shape()) {
    Tensor q = Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda);
    const cudaError_t e =
        qk_norm_rope_d128(x.raw(), w.raw(), cos.raw(), sin.raw(), nullptr, q.raw(), static_cast<const float*>(s.raw()),
                          n, cols / d, r, static_cast<float>(eps), bf, stream());
    if (e == cudaSuccess) return q.with_scale(s);
    H3_ASSERT(e == cudaErrorNotSupported, "qk_norm_rope_fp8: {}", cudaGetErrorString(e));
  }
  // Any other shape: the bf16 op, then the fixed-scale quantization.
  Tensor v = qk_norm_rope(x, w, d, eps, cos, sin, bf);
  Tensor q = Tensor::empty(DType::fp8_e4m3, x.shape(), Device::cuda);
  H3_CUDA(cuda::quantize_fp8_fixed(v.raw(), elem_type(v.dtype()), v.numel(), static_cast<const float*>(s.raw()),
                                   q.raw(), stream()));
  return q.with_scale(s);
}

Tensor procedural(uint64_t base, double scale, double offset, const Shape& shape) {
  Tensor out = Tensor::empty(DType::f32, shape, Device::cuda);
  H3_CUDA(cuda::procedural(base, scale, offset, static_cast<float*>(out.raw()), out.numel(), stream()));
  return out;
}

Tensor quantize_fp8(const Tensor& w) {
  Tensor q = Tensor::empty(DType::fp8_e4m3, w.shape(), Device::cuda);
  Tensor amax = Tensor::empty(DType::f32, {1}, Device::cuda);
  Tensor scale = Tensor::empty(DType::f32, {1}, Device::cuda);
  H3_CUDA(absmax(w.raw(), elem_type(w.dtype()), w.numel(), static_cast<float*>(amax.raw()), stream()));
  H3_CUDA(cuda::quantize_fp8(w.raw(), elem_type(w.dtype()), w.numel(), static_cast<const float*>(amax.raw()), q.raw(),
                             static_cast<float*>(scale.raw()), stream()));
  return q.with_scale(scale);
}

}  // namespace

void register_ops() {
  static ops::BackendOps t;
  t.name = "cuda";
  t.device = Device::cuda;
  t.float_types = ops::dtypes({DType::f32, DType::bf16});
  t.index_types = ops::dtypes({DType::i32, DType::i64});
  t.converts_params = true;
  t.fp8 = true;
  t.linear = linear;
  t.rms_norm = rms_norm;
  t.modulate = modulate;
  t.gate_residual = gate_residual;
  t.add = add;
  t.silu = silu;
  t.swiglu = swiglu;
  t.rope = rope;
  t.attention = attention;
  t.scatter_rows = scatter_rows;
  t.gather_rows = gather_rows;
  t.columns = columns;
  t.set_columns = set_columns;
  t.quantize_fp8 = quantize_fp8;
  t.quantize_fp8_rows = quantize_fp8_rows;
  t.dequantize_fp8 = dequantize_rows;
  t.residual_norm_modulate = residual_norm_modulate;
  t.swiglu_fp8_rows = swiglu_fp8_rows;
  t.qk_norm_rope_fp8 = qk_norm_rope_fp8;
  t.attention_fp8_out = attention_fp8_out;
  t.procedural = procedural;
  t.norm_modulate = norm_modulate;
  t.qk_norm_rope = qk_norm_rope;
  register_vae_ops(t);
  register_text_ops(t);
  t.total_bytes = gpu_total_bytes;
  t.budget_bytes = gpu_budget_bytes;
  t.in_use_bytes = [] { return static_cast<int64_t>(gpu_in_use_bytes()); };
  t.pin_gemms = pin_gemms;
  ops::register_backend(t);
}

}  // namespace h3::cuda

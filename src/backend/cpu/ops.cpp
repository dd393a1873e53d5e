// CPU reference implementations of the op API (ops.h) in f32 and f64: our fixed-order GEMM (or OpenBLAS), the
// thread pool for loops. Every row (and every head) is computed by one thread with a fixed operation order, so
// results never depend on the thread count. Entries of the CPU backend's table (backend/cpu/table.cpp): the front
// door (src/ops) has checked shapes and dtypes.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/cpu/ops.h"
#include "core/knobs.h"
#include "core/parallel.h"
#include "ops/fp8_bound.h"

namespace h3::cpu {

template <typename T>
void gemm_nt(int64_t n, int64_t m, int64_t k, const T* x, const T* w, T* y);  // backend/cpu/gemm.cpp

using ops::round_up_pow2;

namespace {

inline float rb(float v) {
  return round_bf16(v);
}
inline double rb(double v) {
  return v;
}  // bf16 emulation only exists for f32

// The cpu_gemm knob (H3_CPU_GEMM=openblas) trades the fixed reduction order (bitwise results across world sizes)
// for OpenBLAS speed.
template <typename T>
void dispatch_gemm(int64_t n, int64_t m, int64_t k, const T* x, const T* w, T* y) {
  if (!knobs().cpu_gemm_openblas)
    gemm_nt<T>(n, m, k, x, w, y);
  else if constexpr (std::is_same_v<T, float>)
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0f, x, k, w, k, 0.0f, y, m);
  else
    cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, m, k, 1.0, x, k, w, k, 0.0, y, m);
}

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

}  // namespace

Tensor linear(const Tensor& x, const Tensor& w, const Tensor* bias) {
  const int64_t n = x.dim(0), m = w.dim(0), k = x.dim(1);
  Tensor y(x.dtype(), {n, m});
  if (n == 0) return y;
  auto run = [&]<typename T>(T) {
    dispatch_gemm<T>(n, m, k, x.data<T>(), w.data<T>(), y.data<T>());
    if (bias) {
      const T* b = bias->data<T>();
      T* o = y.data<T>();
      for (int64_t r = 0; r < n; ++r)
        for (int64_t c = 0; c < m; ++c) o[r * m + c] += b[c];
    }
  };
  if (x.dtype() == DType::f32)
    run(float{});
  else
    run(double{});
  return y;
}

Tensor rms_norm(const Tensor& x, const Tensor* w, int64_t group, double eps) {
  const int64_t cols = x.numel() / std::max<int64_t>(x.dim(0), 1);
  auto run = [&]<typename T>(T) {
    const T* wp = w ? w->data<T>() : nullptr;
    return map_rows<T>(x, cols, [&](int64_t, const T* in, T* o) {
      for (int64_t g = 0; g < cols; g += group) {
        T ss = 0;
        for (int64_t c = 0; c < group; ++c) ss += in[g + c] * in[g + c];
        T inv = T(1) / std::sqrt(ss / T(group) + T(eps));
        for (int64_t c = 0; c < group; ++c) o[g + c] = wp ? (in[g + c] * inv) * wp[c] : in[g + c] * inv;
      }
    });
  };
  return (x.dtype() == DType::f32 ? run(float{}) : run(double{})).reshape(x.shape());
}

Tensor modulate(const Tensor& h, const Tensor& shift, const Tensor& scale, const Tensor& idx, bool bf16) {
  const int64_t c = h.dim(1);
  const int32_t* ip = idx.data<int32_t>();
  auto run = [&]<typename T>(T) {
    const T* sh = shift.data<T>();
    const T* sc = scale.data<T>();
    return map_rows<T>(h, c, [&](int64_t r, const T* in, T* o) {
      const T* shr = sh + ip[r] * c;
      const T* scr = sc + ip[r] * c;
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
  const int32_t* ip = idx.data<int32_t>();
  auto run = [&]<typename T>(T) {
    const T* g = gate.data<T>();
    const T* yp = y.data<T>();
    return map_rows<T>(x, c, [&](int64_t r, const T* in, T* o) {
      const T* gr = g + ip[r] * c;
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

Tensor rope(const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t head_dim, bool bf16) {
  const int64_t cols = x.dim(1), r = cos.dim(1), half = r / 2;
  auto run = [&]<typename T>(T) {
    const T* cp = cos.data<T>();
    const T* sp = sin.data<T>();
    return map_rows<T>(x, cols, [&](int64_t row, const T* in, T* o) {
      const T* c = cp + row * r;
      const T* s = sp + row * r;
      for (int64_t h = 0; h < cols; h += head_dim) {
        const T* xi = in + h;
        T* xo = o + h;
        for (int64_t j = 0; j < r; ++j) {
          T rot = j < half ? -xi[j + half] : xi[j - half];
          xo[j] = bf16 ? rb(rb(xi[j] * c[j]) + rb(rot * s[j])) : xi[j] * c[j] + rot * s[j];
        }
        for (int64_t j = r; j < head_dim; ++j) xo[j] = xi[j];
      }
    });
  };
  return x.dtype() == DType::f32 ? run(float{}) : run(double{});
}

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  const int64_t nq = q.dim(0), nk = k.dim(0), cols = q.dim(1), heads = cols / d;
  Tensor out(q.dtype(), {nq, cols});
  constexpr int64_t kQBlock = 32, kKBlock = 256;
  const int64_t q_blocks = (nq + kQBlock - 1) / kQBlock;
  auto run = [&]<typename T>(T) {
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    T* op = out.data<T>();
    const T scale = T(1) / std::sqrt(T(d));
    // One task = one head x one block of queries; per query row, keys are visited in the same order always.
    parallel_for(heads * q_blocks, [&](int64_t tb, int64_t te) {
      std::vector<T> s(kKBlock), acc(d);
      for (int64_t task = tb; task < te; ++task) {
        const int64_t h = task / q_blocks, q0 = (task % q_blocks) * kQBlock, q1 = std::min(nq, q0 + kQBlock);
        for (int64_t i = q0; i < q1; ++i) {
          const T* qi = qp + i * cols + h * d;
          T m = -INFINITY, l = 0;
          std::fill(acc.begin(), acc.end(), T(0));
          for (int64_t k0 = 0; k0 < nk; k0 += kKBlock) {
            const int64_t k1 = std::min(nk, k0 + kKBlock);
            T bm = -INFINITY;
            for (int64_t j = k0; j < k1; ++j) {
              const T* kj = kp + j * cols + h * d;
              T dot = 0;
              for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
              s[j - k0] = dot * scale;
              bm = std::max(bm, s[j - k0]);
            }
            const T m_new = std::max(m, bm);
            const T correction = std::exp(m - m_new);
            l *= correction;
            for (int64_t c = 0; c < d; ++c) acc[c] *= correction;
            for (int64_t j = k0; j < k1; ++j) {
              const T p = std::exp(s[j - k0] - m_new);
              l += p;
              const T* vj = vp + j * cols + h * d;
              for (int64_t c = 0; c < d; ++c) acc[c] += p * vj[c];
            }
            m = m_new;
          }
          T* oi = op + i * cols + h * d;
          for (int64_t c = 0; c < d; ++c) oi[c] = acc[c] / l;
        }
      }
    });
  };
  if (nq && nk) {
    if (q.dtype() == DType::f32)
      run(float{});
    else
      run(double{});
  }
  return out;
}

void scatter_rows(Tensor& out, const Tensor& rows, const Tensor& idx) {
  const int64_t n = rows.dim(0);
  const Shape out_tail(out.shape().begin() + 1, out.shape().end());
  const size_t row_bytes = static_cast<size_t>(shape_numel(out_tail)) * dtype_size(out.dtype());
  const int32_t* ip = idx.data<int32_t>();
  auto* o = static_cast<std::byte*>(out.raw());
  const auto* in = static_cast<const std::byte*>(rows.raw());
  for (int64_t i = 0; i < n; ++i) std::copy_n(in + i * row_bytes, row_bytes, o + ip[i] * row_bytes);
}

Tensor gather_rows(const Tensor& x, const Tensor& idx) {
  const int64_t n = idx.numel();
  Shape s = x.shape();
  s[0] = n;
  Tensor out(x.dtype(), s);
  const Shape tail(x.shape().begin() + 1, x.shape().end());
  const size_t row_bytes = static_cast<size_t>(shape_numel(tail)) * dtype_size(x.dtype());
  const int32_t* ip = idx.data<int32_t>();
  auto* o = static_cast<std::byte*>(out.raw());
  const auto* in = static_cast<const std::byte*>(x.raw());
  for (int64_t i = 0; i < n; ++i) std::copy_n(in + ip[i] * row_bytes, row_bytes, o + i * row_bytes);
  return out;
}

// The fused ops are their parts on the CPU.
Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf16) {
  Tensor n = rms_norm(x, &w, x.dim(-1), eps);
  if (bf16) round_bf16_(n);
  return modulate(n, shift, scale, idx, bf16);
}

Tensor qk_norm_rope(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                    const Tensor& sin, bool bf16) {
  Tensor n = rms_norm(x, &w, head_dim, eps);
  if (bf16) round_bf16_(n);
  return rope(n, cos, sin, head_dim, bf16);
}

Tensor quantize_fp8(const Tensor& w) {
  double amax = 0;
  for (int64_t i = 0; i < w.numel(); ++i) amax = std::max(amax, std::abs(w.get(i)));
  const float scale = std::max(static_cast<float>(amax) / 448.0f, 1e-12f);
  Tensor f = w.to(DType::f32);
  float* p = f.data<float>();
  for (int64_t i = 0; i < f.numel(); ++i) p[i] /= scale;
  return f.to(DType::fp8_e4m3).with_scale(Tensor::from(std::vector<float>{scale}, {1}));
}

Tensor dequantize_fp8(const Tensor& q) {
  const Tensor s = q.scale()->cpu().to(DType::f32);
  const int64_t n = q.dim(0), c = q.dim(1);
  const auto* in = static_cast<const uint8_t*>(q.raw());
  Tensor f(DType::f32, q.shape());
  float* p = f.data<float>();
  for (int64_t r = 0; r < n; ++r) {
    const float sc = s.data<float>()[s.numel() == 1 ? 0 : r];
    for (int64_t j = 0; j < c; ++j) p[r * c + j] = fp8e4m3_to_f32(in[r * c + j]) * sc;
  }
  return f.to(DType::bf16);
}

Tensor quantize_fp8_rows(const Tensor& x) {
  const int64_t n = x.dim(0), c = x.dim(1);
  Tensor f = x.to(DType::f32);
  float* p = f.data<float>();
  std::vector<float> scales(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0;
    for (int64_t j = 0; j < c; ++j) amax = std::max(amax, std::abs(p[r * c + j]));
    const float s = round_up_pow2(std::max(amax / 448.0f, 1e-12f));
    scales[static_cast<size_t>(r)] = s;
    for (int64_t j = 0; j < c; ++j) p[r * c + j] /= s;
  }
  return f.to(DType::fp8_e4m3).with_scale(Tensor::from(scales, {n}));
}

ResidualNorm residual_norm_modulate(const Tensor& x, const Tensor& gate, const Tensor& idx, const Tensor& y,
                                    const Tensor& w, double eps, const Tensor& shift, const Tensor& scale, bool bf16,
                                    Fp8Out fp8) {
  ResidualNorm out;
  out.x = gate.defined() ? gate_residual(x, gate, idx, y, bf16) : x;
  out.h = norm_modulate(out.x, w, eps, shift, scale, idx, bf16);
  if (fp8 == Fp8Out::none) return out;
  if (!bf16) round_bf16_(out.h);  // the GPU quantizes the stored bf16 values
  if (fp8 == Fp8Out::rows) {
    out.h = quantize_fp8_rows(out.h);
    return out;
  }
  auto max_abs = [](const Tensor& t, float add) {
    const Tensor f = t.to(DType::f32);
    float m = 0;
    for (int64_t i = 0; i < f.numel(); ++i) m = std::max(m, std::abs(f.data<float>()[i] + add));
    return m;
  };
  const float c = static_cast<float>(x.dim(1));
  const float s = round_up_pow2(std::max(
      (std::sqrt(c) * max_abs(w, 0.0f) * max_abs(scale, 1.0f) + max_abs(shift, 0.0f)) * 1.02f / 448.0f, 1e-12f));
  Tensor f = out.h.to(DType::f32);
  for (int64_t i = 0; i < f.numel(); ++i) f.data<float>()[i] /= s;
  out.h = f.to(DType::fp8_e4m3).with_scale(Tensor::from(std::vector<float>{s}, {1}));
  return out;
}

Tensor qk_norm_rope_fp8(const Tensor& x, const Tensor& w, int64_t head_dim, double eps, const Tensor& cos,
                        const Tensor& sin, bool bf16, const Tensor& scale) {
  Tensor v = qk_norm_rope(x, w, head_dim, eps, cos, sin, bf16).to(DType::f32);
  if (!bf16) round_bf16_(v);  // the GPU quantizes the stored bf16 values
  const float s = scale.cpu().data<float>()[0];
  float* p = v.data<float>();
  for (int64_t i = 0; i < v.numel(); ++i) p[i] /= s;
  return v.to(DType::fp8_e4m3).with_scale(scale.cpu());
}

Tensor swiglu_fp8_rows(const Tensor& u, bool bf16) {
  Tensor g = swiglu(u, bf16);
  if (!bf16) round_bf16_(g);
  return quantize_fp8_rows(g);
}

void round_bf16_(Tensor& x) {
  if (x.dtype() != DType::f32) return;
  float* p = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) p[i] = round_bf16(p[i]);
}

}  // namespace h3::cpu

// CPU reference entries of the norm family (ops/norm.h) in f32 and f64: RMSNorm in its roundings (on host tensors
// all but the reference's f32 norm are the plain one), the fused norms as their parts, LayerNorm, the video encoder's
// GroupNorm and weight normalisation. One task owns whole rows (or groups), so results never depend on the thread
// count.
#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"
#include "core/parallel.h"
#include "ops/fp8_bound.h"

namespace h3::cpu {

using ops::round_up_pow2;

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

Tensor rms_norm_rounded(const Tensor& x, const Tensor& w, int64_t group, double eps) {
  return rms_norm(x, &w, group, eps);
}

Tensor rms_norm_to(const Tensor& x, const Tensor* w, int64_t group, double eps, DType out) {
  Tensor y = rms_norm(x, w, group, eps);
  return y.dtype() == out ? y : y.to(out);
}

Tensor rms_norm_via_f32(const Tensor& x, const Tensor* w, int64_t group, double eps, NormRound round) {
  const int64_t cols = x.ndim() ? x.dim(-1) : 1, rows = cols ? x.numel() / cols : 0;
  Tensor y(DType::f64, x.shape());
  const double* xp = x.data<double>();
  const double* wp = w ? w->data<double>() : nullptr;
  double* yp = y.data<double>();
  const float eps32 = static_cast<float>(eps), n32 = static_cast<float>(group);
  const bool back_to_f32 = round == NormRound::f32_in_f64;
  parallel_for(
      rows,
      [&](int64_t rb, int64_t re) {
        std::vector<float> xf(static_cast<size_t>(group)), sq(static_cast<size_t>(group));
        for (int64_t r = rb; r < re; ++r)
          for (int64_t g = 0; g < cols; g += group) {
            const double* in = xp + r * cols + g;
            double* out = yp + r * cols + g;
            for (int64_t c = 0; c < group; ++c) {
              xf[c] = static_cast<float>(in[c]);
              sq[c] = xf[c] * xf[c];
            }
            const float mean = ops::torch_cpu_sum_f32(sq.data(), group, ops::kReferenceSumLanes) / n32;
            const float inv = 1.0f / std::sqrt(mean + eps32);
            for (int64_t c = 0; c < group; ++c) {
              const float v = xf[c] * inv;
              // With a weight: the f32 product times the f64 weight in f64, then (ATen's composite) cast back
              // to f32, the input's dtype, or (transformers' Qwen3 norm) kept in f64.
              if (!wp)
                out[c] = static_cast<double>(v);
              else if (back_to_f32)
                out[c] = static_cast<double>(static_cast<float>(static_cast<double>(v) * wp[c]));
              else
                out[c] = wp[c] * static_cast<double>(v);
            }
          }
      },
      16);
  return y;
}

// The fused ops are their parts on the CPU.
Tensor norm_modulate(const Tensor& x, const Tensor& w, double eps, const Tensor& shift, const Tensor& scale,
                     const Tensor& idx, bool bf16) {
  Tensor n = rms_norm(x, &w, x.dim(-1), eps);
  if (bf16) round_bf16_(n);
  return modulate(n, shift, scale, idx, bf16);
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

std::pair<Tensor, Tensor> add_scaled_rms_norm(const Tensor& x, const Tensor& y, const Tensor& scale, const Tensor* w,
                                              int64_t group, double eps, DType out) {
  Tensor sum = add_scaled(x, y, scale);
  Tensor normed = rms_norm_to(sum, w, group, eps, out);
  return {std::move(sum), std::move(normed)};
}

Tensor group_norm_frames(const Tensor& x, int64_t groups, const Tensor* w, const Tensor* b, double eps) {
  const int64_t C = x.dim(0), T = x.dim(1), S = x.numel() / std::max<int64_t>(C * T, 1);
  if (w) H3_ASSERT(w->numel() == C, "group_norm_frames: weight {} for {} channels", w->describe(), C);
  if (b) H3_ASSERT(b->numel() == C, "group_norm_frames: bias {} for {} channels", b->describe(), C);
  const int64_t cg = C / groups;
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, w, b, y);
    parallel_for(groups * T, [&](int64_t tb, int64_t te) {
      for (int64_t task = tb; task < te; ++task) {
        const int64_t g = task / T, t = task % T;
        const double n = static_cast<double>(cg * S);
        T_ sum = 0;
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const T_* p = xp + (c * T + t) * S;
          for (int64_t s = 0; s < S; ++s) sum += p[s];
        }
        const T_ mean = sum / T_(n);
        T_ var = 0;
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const T_* p = xp + (c * T + t) * S;
          for (int64_t s = 0; s < S; ++s) var += (p[s] - mean) * (p[s] - mean);
        }
        const T_ inv = T_(1) / std::sqrt(var / T_(n) + T_(eps));
        for (int64_t c = g * cg; c < (g + 1) * cg; ++c) {
          const T_* p = xp + (c * T + t) * S;
          T_* q = yp + (c * T + t) * S;
          const T_ sc = wp ? wp[c] : T_(1), sh = bp ? bp[c] : T_(0);
          for (int64_t s = 0; s < S; ++s) q[s] = (p[s] - mean) * inv * sc + sh;
        }
      }
    });
    return 0;
  });
  return y;
}

Tensor layer_norm(const Tensor& x, const Tensor* w, const Tensor* b, double eps) {
  const int64_t C = x.dim(-1), N = x.numel() / std::max<int64_t>(C, 1);
  if (w) H3_ASSERT(w->numel() == C, "layer_norm: weight {} for width {}", w->describe(), C);
  if (b) H3_ASSERT(b->numel() == C, "layer_norm: bias {} for width {}", b->describe(), C);
  Tensor y(x.dtype(), x.shape());
  dispatch(x, [&]<typename T_>(T_) {
    const auto [xp, wp, bp, yp] = data_of<T_>(x, w, b, y);
    parallel_for(
        N,
        [&](int64_t rb, int64_t re) {
          for (int64_t r = rb; r < re; ++r) {
            const T_* p = xp + r * C;
            T_* q = yp + r * C;
            T_ sum = 0;
            for (int64_t c = 0; c < C; ++c) sum += p[c];
            const T_ mean = sum / T_(C);
            T_ var = 0;
            for (int64_t c = 0; c < C; ++c) var += (p[c] - mean) * (p[c] - mean);
            const T_ inv = T_(1) / std::sqrt(var / T_(C) + T_(eps));
            for (int64_t c = 0; c < C; ++c) {
              T_ v = (p[c] - mean) * inv;
              if (wp) v *= wp[c];
              if (bp) v += bp[c];
              q[c] = v;
            }
          }
        },
        16);
    return 0;
  });
  return y;
}

Tensor weight_norm(const Tensor& g, const Tensor& v) {
  const int64_t rows = v.dim(0), per = v.numel() / std::max<int64_t>(rows, 1);
  Tensor w(v.dtype(), v.shape());
  dispatch(v, [&]<typename T_>(T_) {
    const T_* gp = g.data<T_>();
    const T_* vp = v.data<T_>();
    T_* wp = w.data<T_>();
    for (int64_t r = 0; r < rows; ++r) {
      T_ ss = 0;
      for (int64_t i = 0; i < per; ++i) ss += vp[r * per + i] * vp[r * per + i];
      const T_ f = gp[r] / std::sqrt(ss);
      for (int64_t i = 0; i < per; ++i) wp[r * per + i] = vp[r * per + i] * f;
    }
    return 0;
  });
  return w;
}

}  // namespace h3::cpu

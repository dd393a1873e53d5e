// The video VAE's ViT decoder on one latent block (one temporal chunk x one spatial tile), spec §6.3:
// post_quant_conv -> one token per latent voxel (t, h, w order) -> proj_in -> + registers + one zero token ->
// blocks (RMSNorm, q/k RMSNorm, 3-axis partial RoPE on tile-normalised coordinates, full attention, LayerScale,
// SwiGLU FFN) -> LayerNorm -> proj_out -> drop the suffix tokens -> unpatchify.
#include <cmath>
#include <cstring>

#include "model/video_vae.h"
#include "ops/ops.h"
#include "ops/ops_conv.h"

namespace h3 {

namespace {

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

// x + y * scale[c] row-wise (LayerScale residual).
Tensor add_scaled(const Tensor& x, const Tensor& y, const Tensor& scale) {
  Tensor out(x.dtype(), x.shape());
  const int64_t C = x.dim(1), N = x.dim(0);
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    const T* yp = y.data<T>();
    const T* sp = scale.data<T>();
    T* op = out.data<T>();
    for (int64_t r = 0; r < N; ++r)
      for (int64_t c = 0; c < C; ++c) op[r * C + c] = xp[r * C + c] + yp[r * C + c] * sp[c];
    return 0;
  });
  return out;
}

}  // namespace

// cos/sin [N, rope_dim] for the t*h*w voxel tokens followed by the registers and the zero token (all at 0).
// As in the reference: coordinates 2*((i + 0.5)/size) - 1 and inv_freq = 1/theta^(k*6/rope_dim) are f32 values;
// angle = f32(f32(2*pi) * coord) * inv_freq, taken in the compute precision; per token the layout is
// [t freqs | h freqs | w freqs] repeated twice.
void VideoVae::rope_tables(int64_t t, int64_t h, int64_t w, Tensor& cos, Tensor& sin) const {
  const int64_t R = cfg_.rope_dim(), nf = R / 6, suffix = cfg_.decoder_num_register_tokens + 1;
  const int64_t N = t * h * w + suffix;
  std::vector<float> inv(nf);
  const float step = static_cast<float>(6.0 / static_cast<double>(R));
  for (int64_t k = 0; k < nf; ++k) {
    const float e = static_cast<float>(static_cast<double>(k) * static_cast<double>(step));
    const float p = static_cast<float>(std::pow(cfg_.decoder_rope_theta, static_cast<double>(e)));
    inv[k] = 1.0f / p;
  }
  auto coord = [](int64_t i, int64_t size) {
    const float q = (static_cast<float>(i) + 0.5f) / static_cast<float>(size);
    return 2.0f * q - 1.0f;
  };
  const float two_pi = static_cast<float>(2.0 * M_PI);
  cos = Tensor(ct_, {N, R});
  sin = Tensor(ct_, {N, R});
  dispatch(cos, [&]<typename T>(T) {
    T* cp = cos.data<T>();
    T* sp = sin.data<T>();
    for (int64_t n = 0; n < N; ++n) {
      float pos[3] = {0, 0, 0};
      if (n < t * h * w) {
        pos[0] = coord(n / (h * w), t);
        pos[1] = coord((n / w) % h, h);
        pos[2] = coord(n % w, w);
      }
      for (int a = 0; a < 3; ++a) {
        const float scaled = two_pi * pos[a];
        for (int64_t k = 0; k < nf; ++k) {
          const T ang = static_cast<T>(scaled) * static_cast<T>(inv[k]);
          const T c = std::cos(ang), s = std::sin(ang);
          for (int rep = 0; rep < 2; ++rep) {
            cp[n * R + rep * 3 * nf + a * nf + k] = c;
            sp[n * R + rep * 3 * nf + a * nf + k] = s;
          }
        }
      }
    }
    return 0;
  });
}

Tensor VideoVae::decode_block(const Tensor& z) const {
  const int64_t lc = cfg_.latent_channels;
  H3_CHECK(z.ndim() == 4 && z.dim(0) == lc, "video VAE decoder: block must be [{}, t, h, w], got {}", lc,
           z.describe());
  const int64_t t = z.dim(1), h = z.dim(2), w = z.dim(3), V = t * h * w;
  const int64_t D = cfg_.decoder_dim(), hd = cfg_.decoder_attention_head_dim;
  const int64_t reg = cfg_.decoder_num_register_tokens, N = V + reg + 1;
  const double eps = cfg_.decoder_norm_eps;
  // Tokens [V, lc] in (t, h, w) order: a transpose of the channel-first block.
  Tensor tok(ct_, {V, lc});
  Tensor zc = z.to(ct_);
  dispatch(tok, [&]<typename T>(T) {
    const T* zp = zc.data<T>();
    T* tp = tok.data<T>();
    for (int64_t c = 0; c < lc; ++c)
      for (int64_t v = 0; v < V; ++v) tp[v * lc + c] = zp[c * V + v];
    return 0;
  });
  tok = ops::linear(tok, pq_w_, &pq_b_);               // post_quant_conv (1x1x1)
  Tensor emb = ops::linear(tok, proj_in_w_, &proj_in_b_);  // [V, D]
  Tensor x(ct_, {N, D});
  const size_t es = dtype_size(ct_);
  std::memcpy(x.raw(), emb.raw(), V * D * es);
  std::memcpy(static_cast<std::byte*>(x.raw()) + V * D * es, registers_.raw(), reg * D * es);  // last row stays 0
  Tensor cos, sin;
  rope_tables(t, h, w, cos, sin);

  for (const Block& b : blocks_) {
    Tensor n1 = ops::rms_norm(x, &b.norm1, D, eps);
    Tensor q = ops::rms_norm(ops::linear(n1, b.to_q, &b.q_b), nullptr, hd, eps);
    Tensor k = ops::rms_norm(ops::linear(n1, b.to_k, &b.k_b), nullptr, hd, eps);
    Tensor v = ops::linear(n1, b.to_v, &b.v_b);
    q = ops::rope(q, cos, sin, hd, false);
    k = ops::rope(k, cos, sin, hd, false);
    Tensor a = ops::linear(ops::attention(q, k, v, hd), b.to_out, &b.out_b);
    x = add_scaled(x, a, b.scale1);
    Tensor n2 = ops::rms_norm(x, &b.norm2, D, eps);
    Tensor f = ops::linear(ops::swiglu(ops::linear(n2, b.ff_in, &b.ff_in_b), false), b.ff_out, &b.ff_out_b);
    x = add_scaled(x, f, b.scale2);
  }
  Tensor y = ops::linear(ops::layer_norm(x.rows(0, V), &norm_out_w_, &norm_out_b_, eps), proj_out_w_, &proj_out_b_);

  // Unpatchify: out[c, ti*pt + a, yi*r + bb, xi*r + e] = y[(ti*h + yi)*w + xi, ((c*pt + a)*r + bb)*r + e].
  const int64_t C = cfg_.out_channels, pt = cfg_.temporal_ratio(), r = cfg_.spatial_ratio();
  const int64_t To = t * pt, Ho = h * r, Wo = w * r, P = C * pt * r * r;
  Tensor out(ct_, {C, To, Ho, Wo});
  dispatch(out, [&]<typename T>(T) {
    const T* yp = y.data<T>();
    T* op = out.data<T>();
    for (int64_t v = 0; v < V; ++v) {
      const int64_t ti = v / (h * w), yi = (v / w) % h, xi = v % w;
      const T* row = yp + v * P;
      for (int64_t c = 0; c < C; ++c)
        for (int64_t a = 0; a < pt; ++a)
          for (int64_t bb = 0; bb < r; ++bb)
            for (int64_t e = 0; e < r; ++e)
              op[((c * To + ti * pt + a) * Ho + yi * r + bb) * Wo + xi * r + e] = row[((c * pt + a) * r + bb) * r + e];
    }
    return 0;
  });
  return out;
}

}  // namespace h3

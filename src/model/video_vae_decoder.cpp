// The video VAE's ViT decoder on one latent block (one temporal chunk x one spatial tile), spec §6.3:
// post_quant_conv -> one token per latent voxel (t, h, w order) -> proj_in -> + registers + one zero token ->
// blocks (RMSNorm, q/k RMSNorm, 3-axis partial RoPE on tile-normalised coordinates, full attention, LayerScale,
// SwiGLU FFN) -> LayerNorm -> proj_out -> drop the suffix tokens -> unpatchify.
#include <cmath>
#include <cstring>

#include "model/video_vae.h"
#include "ops/ops.h"
#include "ops/ops_conv.h"
#include "ops/ops_vae.h"

namespace h3 {

namespace {

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

// Copies src's bytes into rows [row, row + src rows) of dst (same device, same row width and dtype).
void copy_rows_into(Tensor& dst, int64_t row, const Tensor& src) {
  H3_ASSERT(dst.device() == src.device() && dst.dtype() == src.dtype() && dst.ndim() == 2 && src.ndim() == 2 &&
                dst.dim(1) == src.dim(1) && row + src.dim(0) <= dst.dim(0),
            "video VAE decoder: rows {} into {} at {}", src.describe(), dst.describe(), row);
  void* at = dst.rows(row, row + src.dim(0)).raw();
  if (src.nbytes() == 0) return;
  if (dst.on_device()) device_hooks().copy(at, true, src.raw(), true, src.nbytes());
  else std::memcpy(at, src.raw(), src.nbytes());
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

void VideoVae::rope_tables_for(int64_t t, int64_t h, int64_t w, DType dt, Tensor& cos, Tensor& sin) const {
  if (dev_ == Device::cpu) {
    rope_tables(t, h, w, cos, sin);
    return;
  }
  std::lock_guard lock(rope_mu_);
  auto it = rope_cache_.find({t, h, w});
  if (it == rope_cache_.end()) {
    Tensor c, s;
    rope_tables(t, h, w, c, s);  // angles as on the CPU (f32), then moved and rounded to the activations' dtype
    it = rope_cache_.emplace(std::tuple{t, h, w}, std::pair{c.to_device(dev_).to(dt), s.to_device(dev_).to(dt)}).first;
  }
  cos = it->second.first;
  sin = it->second.second;
}

Tensor VideoVae::decode_block(const Tensor& z) const {
  const int64_t lc = cfg_.latent_channels;
  H3_CHECK(z.ndim() == 4 && z.dim(0) == lc, "video VAE decoder: block must be [{}, t, h, w], got {}", lc,
           z.describe());
  const int64_t t = z.dim(1), h = z.dim(2), w = z.dim(3), V = t * h * w;
  const int64_t D = cfg_.decoder_dim(), hd = cfg_.decoder_attention_head_dim;
  const int64_t reg = cfg_.decoder_num_register_tokens, N = V + reg + 1;
  const double eps = cfg_.decoder_norm_eps;
  const bool gpu = dev_ != Device::cpu;
  // Tokens [V, lc] in (t, h, w) order: a transpose of the channel-first block (on the host; it is small).
  Tensor tok(ct_, {V, lc});
  Tensor zc = z.on_device() ? z.cpu().to(ct_) : z.to(ct_);
  dispatch(tok, [&]<typename T>(T) {
    const T* zp = zc.data<T>();
    T* tp = tok.data<T>();
    for (int64_t c = 0; c < lc; ++c)
      for (int64_t v = 0; v < V; ++v) tp[v * lc + c] = zp[c * V + v];
    return 0;
  });
  if (gpu) tok = tok.to_device(dev_);
  tok = ops::linear(tok, pq_w_, &pq_b_);                   // post_quant_conv (1x1x1)
  Tensor emb = ops::linear(tok, proj_in_w_, &proj_in_b_);  // [V, D]
  // x = [emb; registers; one zero row] (the residual stream, f32 on the GPU in both precisions).
  Tensor x(ct_, {N, D}, dev_);
  copy_rows_into(x, 0, emb);
  copy_rows_into(x, V, registers_);
  // The blocks' GEMM inputs in the weights' dtype (bf16 in the bf16 recipe), converted once per norm output.
  const DType gemm_dt = blocks_.empty() ? ct_ : blocks_[0].to_q.dtype();
  auto gemm_in = [&](Tensor a) { return a.dtype() == gemm_dt ? a : a.to(gemm_dt); };
  Tensor cos, sin;
  rope_tables_for(t, h, w, gemm_dt, cos, sin);
  // The f64 run follows the reference's precision flow: its block and q/k RMSNorms run on x.float() (f32),
  // the rest of the decoder in f64 (ops_vae.h, rms_norm_via_f32). The f32 and GPU paths keep their own norms.
  const bool norms_via_f32 = ct_ == DType::f64 && !gpu;
  auto norm = [&](const Tensor& a, const Tensor* weight, int64_t group) {
    return norms_via_f32 ? ops::rms_norm_via_f32(a, weight, group, eps)
                         : ops::rms_norm(a, weight, group, eps);
  };
  // q/k: non-affine RMSNorm per head, then RoPE (fused on the GPU, with a weight of ones).
  auto norm_rope = [&](const Tensor& a) {
    if (gpu) return ops::qk_norm_rope(a, qk_ones_, hd, eps, cos, sin, false);
    return ops::rope(norm(a, nullptr, hd), cos, sin, hd, false);
  };

  for (const Block& b : blocks_) {
    Tensor n1 = gemm_in(norm(x, &b.norm1, D));
    Tensor q = norm_rope(ops::linear(n1, b.to_q, &b.q_b));
    Tensor k = norm_rope(ops::linear(n1, b.to_k, &b.k_b));
    Tensor v = ops::linear(n1, b.to_v, &b.v_b);
    Tensor a = ops::linear(ops::attention(q, k, v, hd), b.to_out, &b.out_b);
    x = ops::add_scaled(x, a, b.scale1);
    Tensor n2 = gemm_in(norm(x, &b.norm2, D));
    Tensor f = ops::linear(ops::swiglu(ops::linear(n2, b.ff_in, &b.ff_in_b), false), b.ff_out, &b.ff_out_b);
    x = ops::add_scaled(x, f, b.scale2);
  }
  Tensor y = ops::linear(ops::layer_norm(x.rows(0, V), &norm_out_w_, &norm_out_b_, eps), proj_out_w_, &proj_out_b_);
  return ops::unpatchify3d(y, t, h, w, cfg_.out_channels, cfg_.temporal_ratio(), cfg_.spatial_ratio());
}

}  // namespace h3

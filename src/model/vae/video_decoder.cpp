// The video VAE's ViT decoder on one latent block (one temporal chunk x one spatial tile), spec §6.3:
// post_quant_conv -> one token per latent voxel (t, h, w order) -> proj_in -> + registers + one zero token ->
// blocks (RMSNorm, q/k RMSNorm, 3-axis partial RoPE on tile-normalised coordinates, full attention, LayerScale,
// SwiGLU FFN) -> LayerNorm -> proj_out -> drop the suffix tokens -> unpatchify.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>

#include "core/profile.h"
#include "model/vae/decode_room.h"
#include "model/vae/video_vae.h"
#include "ops/ops.h"

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
  if (dst.on_device())
    device_hooks().copy(at, true, src.raw(), true, src.nbytes());
  else
    std::memcpy(at, src.raw(), src.nbytes());
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

void VideoVae::rope_tables_for(int64_t t, int64_t h, int64_t w, int64_t k, DType dt, Tensor& cos, Tensor& sin) const {
  auto stacked = [&](const Tensor& one) {
    if (k == 1) return one;
    Tensor all(one.dtype(), {k * one.dim(0), one.dim(1)});
    for (int64_t i = 0; i < k; ++i)
      std::memcpy(static_cast<std::byte*>(all.raw()) + i * one.nbytes(), one.raw(), one.nbytes());
    return all;
  };
  if (dev_ == Device::cpu) {
    rope_tables(t, h, w, cos, sin);
    cos = stacked(cos);
    sin = stacked(sin);
    return;
  }
  std::lock_guard lock(rope_mu_);
  auto it = rope_cache_.find({t, h, w, k});
  if (it == rope_cache_.end()) {
    Tensor c, s;
    rope_tables(t, h, w, c, s);  // angles as on the CPU (f32), then moved and rounded to the activations' dtype
    it = rope_cache_
             .emplace(std::tuple{t, h, w, k},
                      std::pair{stacked(c).to_device(dev_).to(dt), stacked(s).to_device(dev_).to(dt)})
             .first;
  }
  cos = it->second.first;
  sin = it->second.second;
}

Tensor VideoVae::decode_block(const Tensor& z) const {
  return decode_blocks({z})[0];
}

int64_t video_decoder_unit_bytes(const VideoVaeConfig& c, Precision p, int64_t t, int64_t h, int64_t w) {
  // The largest set of live activations in one block, per unit, with the allocator's slack: the f32 residual
  // stream twice (x and its update), the bf16/f32 norm output, q, k, v, attention output and projection, the
  // [N, 2F] FFN input projection and the [N, F] SwiGLU output; and the unit's f32 output twice (proj_out rows
  // and the unpatchified tile).
  const int64_t N = t * h * w + c.decoder_num_register_tokens + 1, D = c.decoder_dim();
  const int64_t F = D * c.decoder_ffn_mult, es = p == Precision::bf16 ? 2 : 4;
  const int64_t P = c.out_channels * c.temporal_ratio() * c.spatial_ratio() * c.spatial_ratio();
  const int64_t rows = N * (2 * D * 4 + 6 * D * es + 2 * F * es + F * es) + 2 * t * h * w * P * 4;
  return rows + rows / 4;
}

int64_t VideoVae::decoder_unit_bytes(int64_t t, int64_t h, int64_t w) const {
  return video_decoder_unit_bytes(cfg_, precision_, t, h, w);
}

int64_t VideoVae::batch_size(int64_t t, int64_t h, int64_t w) const {
  const int64_t unit = std::max<int64_t>(decoder_unit_bytes(t, h, w), 1);
  if (dev_ == Device::cpu) return std::clamp<int64_t>((int64_t{2} << 30) / unit, 1, kMaxDecodeBatch);
  // On a GPU: half the room left under the device-memory budget (the other half for the finished units waiting for
  // their stitch, the frames and the allocator's rounding), never more than a quarter of the device, as before there
  // was a budget; refused, naming the need and the room, when one unit needs more than all the room. Smaller tiles
  // would change the frames; fewer units per call do not: decode_blocks runs under ops::PinnedGemms.
  const int64_t quarter =
      std::clamp<int64_t>(static_cast<int64_t>(ops::device_total_bytes(dev_) / 4) / unit, 1, kMaxDecodeBatch);
  return decode_units_per_call("video VAE", fmt::format("unit of {}x{}x{} latents", t, h, w), unit, decode_room(dev_),
                               0.5, quarter);
}

Tensor VideoVae::embed_blocks(const std::vector<Tensor>& blocks, int64_t N) const {
  const int64_t lc = cfg_.latent_channels, K = static_cast<int64_t>(blocks.size());
  const int64_t V = blocks[0].dim(1) * blocks[0].dim(2) * blocks[0].dim(3), D = cfg_.decoder_dim();
  const bool gpu = dev_ != Device::cpu;
  // Tokens [K * V, lc]: block i's voxels in (t, h, w) order at rows [i * V, (i + 1) * V) (a transpose of each
  // channel-first block, on the host; they are small).
  Tensor tok(ct_, {K * V, lc});
  {
    profile::Region r("vae.host_tokens");
    for (int64_t i = 0; i < K; ++i) {
      const Tensor& z = blocks[i];
      Tensor zc = z.on_device() ? z.cpu().to(ct_) : z.to(ct_);
      dispatch(tok, [&]<typename T>(T) {
        const T* zp = zc.data<T>();
        T* tp = tok.data<T>() + i * V * lc;
        for (int64_t c = 0; c < lc; ++c)
          for (int64_t v = 0; v < V; ++v) tp[v * lc + c] = zp[c * V + v];
        return 0;
      });
    }
    if (gpu) tok = tok.to_device(dev_);
  }
  Tensor x(ct_, {K * N, D}, dev_);
  {
    profile::Region r("vae.patch_embed");
    tok = ops::linear(tok, pq_w_, &pq_b_);                   // post_quant_conv (1x1x1)
    Tensor emb = ops::linear(tok, proj_in_w_, &proj_in_b_);  // [K * V, D]
    // x [K * N, D], block i at rows [i * N, (i + 1) * N) = [emb_i (V rows); registers; one zero row] (the residual
    // stream, f32 on the GPU in both precisions).
    for (int64_t i = 0; i < K; ++i) {
      copy_rows_into(x, i * N, emb.rows(i * V, (i + 1) * V));
      copy_rows_into(x, i * N + V, registers_);
    }
  }
  return x;
}

std::vector<Tensor> VideoVae::decode_blocks(const std::vector<Tensor>& blocks) const {
  const int64_t lc = cfg_.latent_channels;
  H3_CHECK(!blocks.empty(), "video VAE decoder: no blocks to decode");
  const Tensor& z0 = blocks[0];
  for (const Tensor& z : blocks)
    H3_CHECK(z.ndim() == 4 && z.dim(0) == lc && z.shape() == z0.shape(),
             "video VAE decoder: blocks must all be [{}, t, h, w] of one shape, got {} and {}", lc, z.describe(),
             z0.describe());
  const int64_t K = static_cast<int64_t>(blocks.size());
  const int64_t t = z0.dim(1), h = z0.dim(2), w = z0.dim(3), V = t * h * w;
  const int64_t D = cfg_.decoder_dim(), hd = cfg_.decoder_attention_head_dim;
  const int64_t reg = cfg_.decoder_num_register_tokens, N = V + reg + 1;
  const double eps = cfg_.decoder_norm_eps;
  const bool gpu = dev_ != Device::cpu;
  // One cuBLASLt algorithm per weight shape, so that a unit's rows come out the same however many are stacked.
  const ops::PinnedGemms pin(dev_);
  Tensor x = embed_blocks(blocks, N);
  // The blocks' GEMM inputs in the weights' dtype (bf16 in the bf16 recipe): the norms round their output to it in
  // the same pass (bitwise the norm then the conversion).
  const DType gemm_dt = blocks_.empty() ? ct_ : blocks_[0].to_q.dtype();
  Tensor cos, sin;
  rope_tables_for(t, h, w, K, gemm_dt, cos, sin);
  // The f64 run follows the reference's precision flow: its block and q/k RMSNorms run on x.float() (f32),
  // the rest of the decoder in f64 (ops/norm.h, NormRound::f32_in_f64). The f32 and GPU paths keep their own norms.
  const bool norms_via_f32 = ct_ == DType::f64 && !gpu;
  auto norm = [&](const Tensor& a, const Tensor* weight, int64_t group) {
    return ops::rms_norm(a, weight, group, eps, norms_via_f32 ? ops::NormRound::f32_in_f64 : ops::NormRound::once);
  };
  // q/k: non-affine RMSNorm per head, then RoPE (fused on the GPU, with a weight of ones).
  auto norm_rope = [&](const Tensor& a) {
    if (gpu) return ops::qk_norm_rope(a, qk_ones_, hd, eps, cos, sin, false);
    return ops::rope(norm(a, nullptr, hd), cos, sin, hd, false);
  };

  // Each residual update runs with the norm that follows it (ops::add_scaled_rms_norm: one pass on the GPU, bitwise
  // the two ops): scale1's with norm2, scale2's with the next block's norm1. The regions name the parts for
  // `bench-decode --profile` (profile.h; a disabled region costs a branch).
  auto gemm = [&](const char* name, const Tensor& a, const Tensor& weight, const Tensor& bias) {
    profile::Region r(name);
    return ops::linear(a, weight, &bias);
  };
  Tensor n1;
  if (!blocks_.empty()) {
    profile::Region r("vae.norm");
    const Tensor* w1 = &blocks_.front().norm1;
    n1 = norms_via_f32 ? norm(x, w1, D) : ops::rms_norm(x, w1, D, eps, ops::NormRound::once, gemm_dt);
  }
  for (size_t li = 0; li < blocks_.size(); ++li) {
    const Block& b = blocks_[li];
    const Block* next = li + 1 < blocks_.size() ? &blocks_[li + 1] : nullptr;
    Tensor q = gemm("vae.q_gemm", n1, b.to_q, b.q_b);
    Tensor k = gemm("vae.k_gemm", n1, b.to_k, b.k_b);
    Tensor v = gemm("vae.v_gemm", n1, b.to_v, b.v_b);
    n1 = Tensor();
    {
      profile::Region r("vae.qk_norm_rope");
      q = norm_rope(q);
      k = norm_rope(k);
    }
    Tensor o;
    {
      profile::Region r("vae.attention");
      o = ops::attention_blocks(q, k, v, hd, K);
    }
    q = k = v = Tensor();
    Tensor a = gemm("vae.out_gemm", o, b.to_out, b.out_b);
    o = Tensor();
    Tensor n2;
    {
      profile::Region r("vae.residual_norm");
      if (norms_via_f32) {
        x = ops::add_scaled(x, a, b.scale1);
        n2 = norm(x, &b.norm2, D);
      } else {
        std::tie(x, n2) = ops::add_scaled_rms_norm(x, a, b.scale1, &b.norm2, D, eps, gemm_dt);
      }
    }
    a = Tensor();
    Tensor hid = gemm("vae.ffn_in_gemm", n2, b.ff_in, b.ff_in_b);
    n2 = Tensor();
    {
      profile::Region r("vae.swiglu");
      hid = ops::swiglu(hid, false);
    }
    Tensor f = gemm("vae.ffn_out_gemm", hid, b.ff_out, b.ff_out_b);
    hid = Tensor();
    {
      profile::Region r(next ? "vae.residual_norm" : "vae.residual");
      if (!next) {
        x = ops::add_scaled(x, f, b.scale2);
      } else if (norms_via_f32) {
        x = ops::add_scaled(x, f, b.scale2);
        n1 = norm(x, &next->norm1, D);
      } else {
        std::tie(x, n1) = ops::add_scaled_rms_norm(x, f, b.scale2, &next->norm1, D, eps, gemm_dt);
      }
    }
  }
  // norm_out and proj_out are row-wise: run on all K * N rows, then each block keeps its V voxel rows.
  Tensor y;
  {
    profile::Region r("vae.head");
    y = ops::linear(ops::layer_norm(x, &norm_out_w_, &norm_out_b_, eps), proj_out_w_, &proj_out_b_);
  }
  x = Tensor();
  profile::Region r("vae.unpatchify");
  std::vector<Tensor> out;
  out.reserve(blocks.size());
  for (int64_t i = 0; i < K; ++i)
    out.push_back(ops::unpatchify3d(y.rows(i * N, i * N + V), t, h, w, cfg_.out_channels, cfg_.temporal_ratio(),
                                    cfg_.spatial_ratio()));
  return out;
}

}  // namespace h3

#include "model/vae/audio_vae.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/json.h"
#include "core/json_limits.h"
#include "io/weight_files.h"
#include "model/vae/decode_room.h"
#include "model/vae/weights.h"
#include "ops/ops.h"

namespace h3 {

namespace {

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

// out = f(x[i]) elementwise on any float tensor, with a per-channel argument for [B, C, L] tensors.
template <typename F>
Tensor map_channels(const Tensor& x, F f) {
  Tensor y(x.dtype(), x.shape());
  const int64_t C = x.dim(1), L = x.dim(2), B = x.dim(0);
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c) {
        const int64_t o = (b * C + c) * L;
        for (int64_t j = 0; j < L; ++j) yp[o + j] = f(c, xp[o + j]);
      }
    return 0;
  });
  return y;
}

Tensor add_into(const Tensor& a, const Tensor& b) {
  return ops::add(a, b);
}

// [B, C, L] -> the last `L - 2*crop` samples centred (crop each side).
Tensor crop_last(const Tensor& x, int64_t left, int64_t right) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2), Lo = L - left - right;
  H3_ASSERT(Lo >= 0, "crop_last: {} by {}+{}", x.describe(), left, right);
  Tensor y(x.dtype(), {B, C, Lo});
  const size_t es = dtype_size(x.dtype());
  const auto* src = static_cast<const std::byte*>(x.raw());
  auto* dst = static_cast<std::byte*>(y.raw());
  for (int64_t r = 0; r < B * C; ++r) std::copy_n(src + (r * L + left) * es, Lo * es, dst + r * Lo * es);
  return y;
}

// [B, C, L] <-> [B, L, C] per batch item.
Tensor transpose12(const Tensor& x) {
  const int64_t B = x.dim(0), C = x.dim(1), L = x.dim(2);
  Tensor y(x.dtype(), {B, L, C});
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t j = 0; j < L; ++j) yp[(b * L + j) * C + c] = xp[(b * C + c) * L + j];
    return 0;
  });
  return y;
}

// A [1,1,K] resampling filter repeated over C depthwise channels -> [C, 1, K].
Tensor depthwise(const Tensor& filt, int64_t C) {
  const int64_t K = filt.numel();
  Tensor w(filt.dtype(), {C, 1, K});
  const size_t es = dtype_size(filt.dtype());
  for (int64_t c = 0; c < C; ++c)
    std::copy_n(static_cast<const std::byte*>(filt.raw()), K * es, static_cast<std::byte*>(w.raw()) + c * K * es);
  return w;
}

}  // namespace

int64_t AudioVaeConfig::hop() const {
  return std::accumulate(encoder_rates.begin(), encoder_rates.end(), int64_t{1}, std::multiplies<>());
}

AudioVaeConfig AudioVaeConfig::from_json_text(const std::string& text, const std::string& where) {
  AudioVaeConfig c;
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, where + ": audio VAE config");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: audio VAE config is not valid JSON: {}", where, e.what());
  }
  try {
    read_if(j, "encoder_dim", c.encoder_dim);
    read_if(j, "encoder_rates", c.encoder_rates);
    read_if(j, "latent_dim", c.latent_dim);
    read_if(j, "latent_channels", c.latent_channels);
    read_if(j, "num_attention_heads", c.num_attention_heads);
    read_if(j, "decoder_dim", c.decoder_dim);
    read_if(j, "decoder_rates", c.decoder_rates);
    read_if(j, "decoder_kernel_sizes", c.decoder_kernel_sizes);
    read_if(j, "resblock_kernel_sizes", c.resblock_kernel_sizes);
    read_if(j, "resblock_dilation_sizes", c.resblock_dilation_sizes);
    read_if(j, "sampling_rate", c.sampling_rate);
    read_if(j, "latents_mean", c.latents_mean);
    read_if(j, "latents_std", c.latents_std);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: audio VAE config has a field of the wrong type: {}", where, e.what());
  }
  c.validate(where);
  return c;
}

void AudioVaeConfig::validate(const std::string& where) const {
  const int64_t up = std::accumulate(decoder_rates.begin(), decoder_rates.end(), int64_t{1}, std::multiplies<>());
  H3_CHECK(up == hop(), "{}: audio VAE decoder_rates upsample by {} but the encoder hop is {}", where, up, hop());
  H3_CHECK(decoder_rates.size() == decoder_kernel_sizes.size(),
           "{}: audio VAE has {} decoder rates but {} kernel sizes", where, decoder_rates.size(),
           decoder_kernel_sizes.size());
  H3_CHECK(resblock_kernel_sizes.size() == resblock_dilation_sizes.size() && !resblock_kernel_sizes.empty(),
           "{}: audio VAE resblock kernels/dilations disagree", where);
  H3_CHECK(num_attention_heads > 0 && latent_dim % num_attention_heads == 0,
           "{}: audio VAE latent_dim {} not divisible by {} heads", where, latent_dim, num_attention_heads);
  H3_CHECK((decoder_dim >> decoder_rates.size()) > 0, "{}: audio VAE decoder_dim {} too small for {} upsamplers", where,
           decoder_dim, decoder_rates.size());
  H3_CHECK(latents_mean.size() == latents_std.size() &&
               (latents_mean.empty() || static_cast<int64_t>(latents_mean.size()) == latent_channels),
           "{}: audio VAE latents_mean/std have {}/{} values for {} channels", where, latents_mean.size(),
           latents_std.size(), latent_channels);
}

std::string AudioVaeConfig::summary() const {
  return fmt::format(
      "audio VAE: hop {}, latent {} ch, trunk {}, encoder dim {} rates [{}], decoder dim {} rates [{}] "
      "kernels [{}], AMP kernels [{}], {} heads, {} Hz",
      hop(), latent_channels, latent_dim, encoder_dim, fmt::join(encoder_rates, ","), decoder_dim,
      fmt::join(decoder_rates, ","), fmt::join(decoder_kernel_sizes, ","), fmt::join(resblock_kernel_sizes, ","),
      num_attention_heads, sampling_rate);
}

namespace {

// A weight-normalised convolution's weight w = g * v / ||v|| from its stored g and v (v of `v_shape`).
Tensor weight_normed(VaeWeightReader& r, const std::string& n, const Shape& v_shape) {
  Tensor g = r.get(n + ".weight_g", {v_shape[0], 1, 1});
  Tensor v = r.get(n + ".weight_v", v_shape);
  return ops::weight_norm(g, v);
}

}  // namespace

AudioVae::Act AudioVae::read_act(VaeWeightReader& r, const std::string& n, int64_t C, const std::string& path) {
  Act a;
  a.alpha = r.get(n + ".act.alpha", {C});
  a.beta = r.get(n + ".act.beta", {C});
  a.up_filter = r.get(n + ".upsample.filter", {});
  a.down_filter = r.get(n + ".downsample.lowpass.filter", {});
  H3_CHECK(a.up_filter.numel() > 0 && a.down_filter.numel() > 0, "{}: empty resampling filter in {}", path, n);
  a.up_filter = depthwise(a.up_filter, C);
  a.down_filter = depthwise(a.down_filter, C);
  return a;
}

void AudioVae::load_decoder(VaeWeightReader& r, const std::string& path) {
  const int64_t lc = cfg_.latent_channels, ld = cfg_.latent_dim;
  auto wn = [&](const std::string& n, const Shape& v_shape) { return weight_normed(r, n, v_shape); };
  auto act = [&](const std::string& n, int64_t C) { return read_act(r, n, C, path); };
  dec_in_w_ = r.get("dec_in_proj.weight", {ld, lc, 1});
  dec_in_b_ = r.get("dec_in_proj.bias", {ld});
  conv_pre_w_ = wn("decoder.conv_pre", {cfg_.decoder_dim, ld, 7});
  conv_pre_b_ = r.get("decoder.conv_pre.bias", {cfg_.decoder_dim});
  int64_t ch = cfg_.decoder_dim;
  for (size_t i = 0; i < cfg_.decoder_rates.size(); ++i) {
    const std::string n = fmt::format("decoder.ups.{}.0", i);
    ups_w_.push_back(wn(n, {ch, ch / 2, cfg_.decoder_kernel_sizes[i]}));
    ups_b_.push_back(r.get(n + ".bias", {ch / 2}));
    ch /= 2;
    for (size_t j = 0; j < cfg_.resblock_kernel_sizes.size(); ++j) {
      const std::string rn = fmt::format("decoder.resblocks.{}", i * cfg_.resblock_kernel_sizes.size() + j);
      AmpBlock blk;
      blk.kernel = cfg_.resblock_kernel_sizes[j];
      blk.dilations = cfg_.resblock_dilation_sizes[j];
      for (size_t d = 0; d < blk.dilations.size(); ++d) {
        blk.w1.push_back(wn(fmt::format("{}.convs1.{}", rn, d), {ch, ch, blk.kernel}));
        blk.b1.push_back(r.get(fmt::format("{}.convs1.{}.bias", rn, d), {ch}));
        blk.w2.push_back(wn(fmt::format("{}.convs2.{}", rn, d), {ch, ch, blk.kernel}));
        blk.b2.push_back(r.get(fmt::format("{}.convs2.{}.bias", rn, d), {ch}));
        blk.acts.push_back(act(fmt::format("{}.activations.{}", rn, 2 * d), ch));
        blk.acts.push_back(act(fmt::format("{}.activations.{}", rn, 2 * d + 1), ch));
      }
      resblocks_.push_back(std::move(blk));
    }
  }
  act_post_ = act("decoder.activation_post", ch);
  conv_post_w_ = wn("decoder.conv_post", {1, ch, 7});
}

// Optional: decode-only checkpoints may leave the encoder out.
void AudioVae::load_encoder(VaeWeightReader& r) {
  const int64_t lc = cfg_.latent_channels, ld = cfg_.latent_dim;
  auto wn = [&](const std::string& n, const Shape& v_shape) { return weight_normed(r, n, v_shape); };
  has_encoder_ = r.has("encoder.block.0.weight_v");
  if (has_encoder_) {
    int64_t d = cfg_.encoder_dim;
    enc_in_w_ = wn("encoder.block.0", {d, 1, 7});
    enc_in_b_ = r.get("encoder.block.0.bias", {d});
    for (size_t i = 0; i < cfg_.encoder_rates.size(); ++i) {
      const std::string bn = fmt::format("encoder.block.{}.block", i + 1);
      EncBlock eb;
      eb.stride = cfg_.encoder_rates[i];
      const int64_t dilations[3] = {1, 3, 9};
      for (int u = 0; u < 3; ++u) {
        const std::string un = fmt::format("{}.{}.block", bn, u);
        ResUnit ru;
        ru.dilation = dilations[u];
        ru.alpha1 = r.get(un + ".0.alpha", {1, d, 1});
        ru.w1 = wn(un + ".1", {d, d, 7});
        ru.b1 = r.get(un + ".1.bias", {d});
        ru.alpha2 = r.get(un + ".2.alpha", {1, d, 1});
        ru.w2 = wn(un + ".3", {d, d, 1});
        ru.b2 = r.get(un + ".3.bias", {d});
        eb.units.push_back(std::move(ru));
      }
      eb.alpha = r.get(bn + ".3.alpha", {1, d, 1});
      eb.w = wn(bn + ".4", {2 * d, d, 2 * eb.stride});
      eb.b = r.get(bn + ".4.bias", {2 * d});
      enc_blocks_.push_back(std::move(eb));
      d *= 2;
    }
    const size_t n = cfg_.encoder_rates.size();
    enc_alpha_ = r.get(fmt::format("encoder.block.{}.alpha", n + 1), {1, d, 1});
    enc_out_w_ = wn(fmt::format("encoder.block.{}", n + 2), {ld, d, 3});
    enc_out_b_ = r.get(fmt::format("encoder.block.{}.bias", n + 2), {ld});
    n1_w_ = r.get("pre_block.norm1.weight", {ld});
    n1_b_ = r.get("pre_block.norm1.bias", {ld});
    n3_w_ = r.get("pre_block.norm3.weight", {ld});
    n3_b_ = r.get("pre_block.norm3.bias", {ld});
    n2_w_ = r.get("pre_block.norm2.weight", {lc});
    n2_b_ = r.get("pre_block.norm2.bias", {lc});
    qkv_w_ = r.get("pre_block.attn.qkv.weight", {3 * ld, ld});
    // The fused projection's bias is [q_bias; zero_k_bias; v_bias].
    Tensor qb = r.get("pre_block.attn.q_bias", {ld}), vb = r.get("pre_block.attn.v_bias", {ld});
    Tensor kb = r.has("pre_block.attn.zero_k_bias") ? r.get("pre_block.attn.zero_k_bias", {ld}) : Tensor(ct_, {ld});
    qkv_b_ = Tensor(ct_, {3 * ld});
    const size_t bytes = static_cast<size_t>(ld) * dtype_size(ct_);
    std::memcpy(static_cast<std::byte*>(qkv_b_.raw()), qb.raw(), bytes);
    std::memcpy(static_cast<std::byte*>(qkv_b_.raw()) + bytes, kb.raw(), bytes);
    std::memcpy(static_cast<std::byte*>(qkv_b_.raw()) + 2 * bytes, vb.raw(), bytes);
    attn_proj_w_ = r.get("pre_block.attn.proj.weight", {lc, lc});
    attn_proj_b_ = r.get("pre_block.attn.proj.bias", {lc});
    proj_w_ = r.get("pre_block.proj.weight", {lc, ld});
    proj_b_ = r.get("pre_block.proj.bias", {lc});
    mlp_norm_w_ = r.get("pre_block.mlp.norm.weight", {lc});
    mlp_norm_b_ = r.get("pre_block.mlp.norm.bias", {lc});
    w0_w_ = r.get("pre_block.mlp.w0.weight", {2 * lc, lc});
    w0_b_ = r.get("pre_block.mlp.w0.bias", {2 * lc});
    w1_w_ = r.get("pre_block.mlp.w1.weight", {2 * lc, lc});
    w1_b_ = r.get("pre_block.mlp.w1.bias", {2 * lc});
    w2_w_ = r.get("pre_block.mlp.w2.weight", {lc, 2 * lc});
    w2_b_ = r.get("pre_block.mlp.w2.bias", {lc});
    mean_w_ = r.get("mean_proj.weight", {lc, lc, 1});
    mean_b_ = r.get("mean_proj.bias", {lc});
  }
}

AudioVae::AudioVae(const SafeTensors& f, const std::string& prefix, const AudioVaeConfig& cfg, Precision precision,
                   Device device)
    : AudioVae(*WeightFiles::of(f), prefix, cfg, precision, device) {}

AudioVae::AudioVae(const TensorSource& f, const std::string& prefix, const AudioVaeConfig& cfg, Precision precision,
                   Device device)
    : cfg_(cfg), dev_(device) {
  if (dev_ == Device::cpu)
    H3_CHECK(precision == Precision::f64 || precision == Precision::f32,
             "audio VAE: {} is not supported on the CPU; use f32 or f64", precision_name(precision));
  else
    H3_CHECK(precision == Precision::f32 || precision == Precision::bf16,
             "audio VAE on the GPU: precision {} is not supported; use f32 (bf16 also runs in f32 there)",
             precision_name(precision));
  ct_ = precision == Precision::f64 ? DType::f64 : DType::f32;
  cfg_.validate(f.path());
  // Read on the host (the weight-normalised convolutions are folded there), then uploaded: the decoder is small.
  DeviceLoader host(Device::cpu, "audio VAE");
  VaeWeightReader r(f, prefix, ct_, "audio VAE", host);
  load_decoder(r, f.path());
  load_encoder(r);
  r.finish();
  const int64_t lc = cfg_.latent_channels;
  if (!cfg_.latents_mean.empty()) {
    lat_mean_ = Tensor::from(cfg_.latents_mean, {lc}).to(ct_);
    lat_std_ = Tensor::from(cfg_.latents_std, {lc}).to(ct_);
  }
  if (dev_ != Device::cpu) upload_decoder();
  load_report_ = host.finish();
}

void AudioVae::upload_decoder() {
  auto up = [&](Tensor& t) { t = t.to_device(dev_); };
  auto up_act = [&](Act& a) {
    for (Tensor* t : {&a.alpha, &a.beta, &a.up_filter, &a.down_filter}) up(*t);
  };
  for (Tensor* t : {&dec_in_w_, &dec_in_b_, &conv_pre_w_, &conv_pre_b_, &conv_post_w_}) up(*t);
  for (auto& t : ups_w_) up(t);
  for (auto& t : ups_b_) up(t);
  for (AmpBlock& blk : resblocks_) {
    for (auto* list : {&blk.w1, &blk.b1, &blk.w2, &blk.b2})
      for (Tensor& t : *list) up(t);
    for (Act& a : blk.acts) up_act(a);
  }
  up_act(act_post_);
}

// Upsample x2 (replicate pad, depthwise transposed Kaiser-sinc filter, x ratio, crop), SnakeBeta
// x + 1/(e^beta + 1e-9) * sin^2(e^alpha x), downsample x2 (replicate pad, depthwise filter, stride 2).
Tensor AudioVae::activation(const Act& a, const Tensor& x) const {
  const int64_t C = x.dim(1), K = a.up_filter.dim(2), ratio = 2;
  const int64_t pad = K / ratio - 1;
  const int64_t crop_l = pad * ratio + (K - ratio) / 2, crop_r = pad * ratio + (K - ratio + 1) / 2;
  Tensor up =
      ops::conv_transpose1d(ops::pad1d(x, pad, pad, ops::PadMode::replicate), a.up_filter, nullptr, ratio, 0, C);
  up = ops::slice_last(up, crop_l, up.dim(2) - crop_r);
  Tensor snake = ops::snake_beta(up, a.alpha, a.beta, static_cast<double>(ratio));
  const int64_t Kd = a.down_filter.dim(2);
  const int64_t pl = Kd / 2 - (Kd % 2 == 0 ? 1 : 0), pr = Kd / 2;
  return ops::conv1d(ops::pad1d(snake, pl, pr, ops::PadMode::replicate), a.down_filter, nullptr, ratio, 0, 1, C);
}

Tensor AudioVae::amp_block(const AmpBlock& blk, const Tensor& x) const {
  Tensor h = x;
  for (size_t d = 0; d < blk.dilations.size(); ++d) {
    const int64_t k = blk.kernel, dil = blk.dilations[d];
    Tensor r = ops::conv1d(activation(blk.acts[2 * d], h), blk.w1[d], &blk.b1[d], 1, (k * dil - dil) / 2, dil, 1);
    r = ops::conv1d(activation(blk.acts[2 * d + 1], r), blk.w2[d], &blk.b2[d], 1, (k - 1) / 2, 1, 1);
    h = add_into(r, h);
  }
  return h;
}

int64_t audio_decoder_item_bytes(const AudioVaeConfig& c, int64_t frames) {
  int64_t channels = c.decoder_dim, samples = frames, widest = channels * samples;
  for (int64_t rate : c.decoder_rates) {
    channels = std::max<int64_t>(channels / 2, 1);
    samples *= rate;
    widest = std::max(widest, channels * samples);
  }
  return widest * 4 * 16;
}

Tensor AudioVae::decode(const Tensor& latents, int64_t max_items) const {
  H3_CHECK(latents.ndim() == 3 && latents.dim(1) == cfg_.latent_channels && latents.dim(2) > 0,
           "audio VAE decode: latents must be [batch, {}, frames] (stereo = 2 batch items), got {}",
           cfg_.latent_channels, latents.describe());
  H3_CHECK(dtype_is_float(latents.dtype()), "audio VAE decode: latents must be floating point, got {}",
           latents.describe());
  const int64_t B = latents.dim(0), A = latents.dim(2);
  const int64_t k = max_items > 0 ? std::min(max_items, B)
                                  : decode_units_per_call("audio VAE", fmt::format("item of {} latent frames", A),
                                                          audio_decoder_item_bytes(cfg_, A), decode_room(dev_), 1.0, B);
  if (k >= B) return decode_items(latents);
  // Items k at a time into one host waveform [B, 1, A * hop].
  Tensor out;
  for (int64_t b = 0; b < B; b += k) {
    const Tensor part = decode_items(latents.rows(b, std::min(B, b + k)));
    if (!out.defined()) out = Tensor(part.dtype(), {B, part.dim(1), part.dim(2)});
    std::memcpy(static_cast<std::byte*>(out.raw()) + static_cast<size_t>(b) * (part.nbytes() / part.dim(0)), part.raw(),
                part.nbytes());
  }
  return out;
}

Tensor AudioVae::decode_items(const Tensor& latents) const {
  Tensor x = latents.on_device() ? latents.cpu().to(ct_) : latents.to(ct_);
  if (dev_ != Device::cpu) x = x.to_device(dev_);
  x = ops::conv1d(x, dec_in_w_, &dec_in_b_, 1, 0, 1, 1);
  x = ops::conv1d(x, conv_pre_w_, &conv_pre_b_, 1, 3, 1, 1);
  const size_t nk = cfg_.resblock_kernel_sizes.size();
  for (size_t i = 0; i < ups_w_.size(); ++i) {
    const int64_t rate = cfg_.decoder_rates[i], k = cfg_.decoder_kernel_sizes[i];
    x = ops::conv_transpose1d(x, ups_w_[i], &ups_b_[i], rate, (k - rate) / 2, 1);
    Tensor sum;
    for (size_t j = 0; j < nk; ++j) {
      Tensor b = amp_block(resblocks_[i * nk + j], x);
      sum = j == 0 ? b : ops::add(sum, b);
    }
    x = ops::divide_clamp(sum, static_cast<double>(nk), -INFINITY, INFINITY);  // the kernels' average
  }
  x = activation(act_post_, x);
  x = ops::conv1d(x, conv_post_w_, nullptr, 1, 3, 1, 1);
  x = ops::divide_clamp(x, 1.0, -1.0, 1.0);
  return x.on_device() ? x.cpu() : x;
}

Tensor AudioVae::residual_unit(const ResUnit& u, const Tensor& x) const {
  auto snake = [&](const Tensor& alpha, const Tensor& h) {
    return dispatch(h, [&]<typename T>(T) {
      const T* a = alpha.data<T>();
      return map_channels(h, [&](int64_t c, T v) {
        const T s = std::sin(a[c] * v);
        return v + (T(1) / (a[c] + T(1e-9))) * (s * s);
      });
    });
  };
  Tensor r = ops::conv1d(snake(u.alpha1, x), u.w1, &u.b1, 1, 3 * u.dilation, u.dilation, 1);
  r = ops::conv1d(snake(u.alpha2, r), u.w2, &u.b2, 1, 0, 1, 1);
  const int64_t crop = (x.dim(2) - r.dim(2)) / 2;
  return ops::add(crop > 0 ? crop_last(x, crop, crop) : x, r);
}

Tensor AudioVae::pre_block(const Tensor& rows) const {
  const int64_t T_ = rows.dim(0), ld = cfg_.latent_dim, lc = cfg_.latent_channels;
  const int64_t heads = cfg_.num_attention_heads, hd = ld / heads;
  Tensor side = ops::linear(ops::layer_norm(rows, &n3_w_, &n3_b_, 1e-5), proj_w_, &proj_b_);
  Tensor qkv = ops::linear(ops::layer_norm(rows, &n1_w_, &n1_b_, 1e-5), qkv_w_, &qkv_b_);
  Tensor att = ops::attention_causal(ops::columns(qkv, 0, ld), ops::columns(qkv, ld, 2 * ld),
                                     ops::columns(qkv, 2 * ld, 3 * ld), hd);
  // Mean over heads -> [T, hd], then adaptive average pooling of the hd features down to lc.
  Tensor pooled = dispatch(att, [&]<typename T>(T) {
    Tensor out(att.dtype(), {T_, lc});
    const T* ap = att.data<T>();
    T* op = out.data<T>();
    std::vector<T> m(hd);
    for (int64_t t = 0; t < T_; ++t) {
      for (int64_t c = 0; c < hd; ++c) {
        T s = 0;
        for (int64_t h = 0; h < heads; ++h) s += ap[t * ld + h * hd + c];
        m[c] = s / T(static_cast<double>(heads));
      }
      for (int64_t i = 0; i < lc; ++i) {
        const int64_t b = (i * hd) / lc, e = ((i + 1) * hd + lc - 1) / lc;
        T s = 0;
        for (int64_t c = b; c < e; ++c) s += m[c];
        op[t * lc + i] = s / T(static_cast<double>(e - b));
      }
    }
    return out;
  });
  Tensor y = ops::add(side, ops::linear(pooled, attn_proj_w_, &attn_proj_b_));
  Tensor n = ops::layer_norm(ops::layer_norm(y, &n2_w_, &n2_b_, 1e-5), &mlp_norm_w_, &mlp_norm_b_, 1e-5);
  Tensor a = ops::linear(n, w0_w_, &w0_b_), b = ops::linear(n, w1_w_, &w1_b_);
  Tensor g = dispatch(a, [&]<typename T>(T) {
    Tensor out(a.dtype(), a.shape());
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    T* op = out.data<T>();
    const T k0 = std::sqrt(T(2) / T(M_PI)), k1 = T(0.044715);
    for (int64_t i = 0; i < a.numel(); ++i) {
      const T v = ap[i];
      op[i] = T(0.5) * v * (T(1) + std::tanh(k0 * (v + k1 * v * v * v))) * bp[i];
    }
    return out;
  });
  return ops::add(y, ops::linear(g, w2_w_, &w2_b_));
}

Tensor AudioVae::encode_mean(const Tensor& waveform) const {
  H3_CHECK(has_encoder_, "audio VAE encode: this checkpoint has no encoder weights (encoder.block.*)");
  H3_CHECK(waveform.ndim() == 3 && waveform.dim(1) == 1 && waveform.dim(2) > 0,
           "audio VAE encode: waveform must be [batch, 1, samples] (mono; stereo = 2 batch items), got {}",
           waveform.describe());
  const int64_t hop = cfg_.hop(), N = waveform.dim(2), padded = (N + hop - 1) / hop * hop;
  Tensor x = ops::pad1d(waveform.to(ct_), 0, padded - N, ops::PadMode::zeros);
  x = ops::conv1d(x, enc_in_w_, &enc_in_b_, 1, 3, 1, 1);
  for (const auto& eb : enc_blocks_) {
    for (const auto& u : eb.units) x = residual_unit(u, x);
    x = dispatch(x, [&]<typename T>(T) {
      const T* a = eb.alpha.data<T>();
      return map_channels(x, [&](int64_t c, T v) {
        const T s = std::sin(a[c] * v);
        return v + (T(1) / (a[c] + T(1e-9))) * (s * s);
      });
    });
    x = ops::conv1d(x, eb.w, &eb.b, eb.stride, (eb.stride + 1) / 2, 1, 1);
  }
  x = dispatch(x, [&]<typename T>(T) {
    const T* a = enc_alpha_.data<T>();
    return map_channels(x, [&](int64_t c, T v) {
      const T s = std::sin(a[c] * v);
      return v + (T(1) / (a[c] + T(1e-9))) * (s * s);
    });
  });
  x = ops::conv1d(x, enc_out_w_, &enc_out_b_, 1, 1, 1, 1);  // [B, latent_dim, frames]
  Tensor rows = transpose12(x);                             // [B, frames, latent_dim]
  const int64_t B = rows.dim(0), F = rows.dim(1), lc = cfg_.latent_channels;
  Tensor y(ct_, {B, F, lc});
  const size_t per = static_cast<size_t>(F * lc) * dtype_size(ct_);
  for (int64_t b = 0; b < B; ++b) {
    Tensor r = pre_block(rows.rows(b, b + 1).reshape({F, cfg_.latent_dim}).clone());
    std::memcpy(static_cast<std::byte*>(y.raw()) + b * per, r.raw(), per);
  }
  return ops::conv1d(transpose12(y), mean_w_, &mean_b_, 1, 0, 1, 1);
}

namespace {

// The latents' per-channel statistics applied (z * std + mean) or removed ((z - mean) / std) in the compute dtype
// `ct`; without statistics the latents pass unchanged.
Tensor channel_stats(const Tensor& z, const Tensor& mean, const Tensor& stdev, int64_t channels, DType ct,
                     bool remove) {
  H3_CHECK(z.ndim() == 3 && z.dim(1) == channels, "audio VAE: latents must be [batch, {}, frames], got {}", channels,
           z.describe());
  Tensor x = z.to(ct);
  if (!mean.defined() || mean.numel() == 0) return x;
  return dispatch(x, [&]<typename T>(T) {
    const T* m = mean.data<T>();
    const T* s = stdev.data<T>();
    if (remove) return map_channels(x, [&](int64_t c, T v) { return (v - m[c]) / s[c]; });
    return map_channels(x, [&](int64_t c, T v) { return v * s[c] + m[c]; });
  });
}

}  // namespace

Tensor AudioVae::denormalize(const Tensor& z) const {
  return channel_stats(z, lat_mean_, lat_std_, cfg_.latent_channels, ct_, false);
}

Tensor AudioVae::normalize(const Tensor& z) const {
  return channel_stats(z, lat_mean_, lat_std_, cfg_.latent_channels, ct_, true);
}

}  // namespace h3

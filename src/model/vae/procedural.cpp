#include "model/vae/procedural.h"

#include <cmath>

#include "io/procedural.h"

namespace h3 {

VideoVaeConfig procedural_video_vae_config() {
  VideoVaeConfig c;
  c.latent_channels = 24;
  // Tiny widths; the encoder levels fix the strides: 16x spatial, 4x temporal as released.
  c.block_out_channels = {16, 16, 16, 16};
  c.spatial_downsample_factors = {2, 2, 2, 2};
  c.temporal_downsample_factors = {1, 2, 2, 1};
  c.layers_per_block = 1;
  c.norm_num_groups = 8;
  c.decoder_num_layers = 2;
  c.decoder_num_attention_heads = 2;
  c.decoder_attention_head_dim = 16;
  c.decoder_num_register_tokens = 2;
  c.decoder_ffn_mult = 2;
  c.validate("procedural video VAE");
  return c;
}

AudioVaeConfig procedural_audio_vae_config() {
  AudioVaeConfig c;
  c.latent_channels = 32;
  c.latent_dim = 64;
  c.num_attention_heads = 2;
  c.encoder_dim = 8;
  c.encoder_rates = {2, 4, 4, 5, 5};  // hop 800: 40 latents per second at 32 kHz, as released
  c.decoder_dim = 128;
  c.decoder_rates = {5, 5, 2, 2, 2, 2, 2};
  c.decoder_kernel_sizes = {9, 9, 4, 4, 4, 4, 4};
  c.resblock_kernel_sizes = {3};
  c.resblock_dilation_sizes = {{1, 3}};
  c.sampling_rate = 32000;
  c.validate("procedural audio VAE");
  return c;
}

std::vector<std::pair<std::string, Shape>> video_vae_decoder_parameters(const VideoVaeConfig& c) {
  const int64_t lc = c.latent_channels, D = c.decoder_dim(), F = D * c.decoder_ffn_mult;
  const int64_t out = c.out_channels * c.temporal_ratio() * c.spatial_ratio() * c.spatial_ratio();
  std::vector<std::pair<std::string, Shape>> p = {
      {"post_quant_conv.weight", {lc, lc, 1, 1, 1}},
      {"post_quant_conv.bias", {lc}},
      {"decoder.proj_in.weight", {D, lc}},
      {"decoder.proj_in.bias", {D}},
      {"decoder.register_tokens", {1, c.decoder_num_register_tokens, D}},
  };
  for (int64_t i = 0; i < c.decoder_num_layers; ++i) {
    const std::string n = fmt::format("decoder.transformer_blocks.{}.", i);
    for (const char* s : {"norm1.weight", "norm2.weight", "scale1", "scale2"}) p.push_back({n + s, {D}});
    for (const char* s : {"attn.to_q", "attn.to_k", "attn.to_v", "attn.to_out.0"}) {
      p.push_back({n + s + ".weight", {D, D}});
      p.push_back({n + s + ".bias", {D}});
    }
    p.push_back({n + "ff.net.0.proj.weight", {2 * F, D}});
    p.push_back({n + "ff.net.0.proj.bias", {2 * F}});
    p.push_back({n + "ff.net.2.weight", {D, F}});
    p.push_back({n + "ff.net.2.bias", {D}});
  }
  p.push_back({"decoder.norm_out.weight", {D}});
  p.push_back({"decoder.norm_out.bias", {D}});
  p.push_back({"decoder.proj_out.weight", {out, D}});
  p.push_back({"decoder.proj_out.bias", {out}});
  return p;
}

std::vector<std::pair<std::string, Shape>> audio_vae_decoder_parameters(const AudioVaeConfig& c) {
  const int64_t lc = c.latent_channels, ld = c.latent_dim;
  std::vector<std::pair<std::string, Shape>> p = {{"dec_in_proj.weight", {ld, lc, 1}}, {"dec_in_proj.bias", {ld}}};
  auto wn = [&](const std::string& n, const Shape& v) {
    p.push_back({n + ".weight_g", {v[0], 1, 1}});
    p.push_back({n + ".weight_v", v});
  };
  auto act = [&](const std::string& n, int64_t ch) {
    p.push_back({n + ".act.alpha", {ch}});
    p.push_back({n + ".act.beta", {ch}});
    p.push_back({n + ".upsample.filter", {1, 1, 12}});
    p.push_back({n + ".downsample.lowpass.filter", {1, 1, 12}});
  };
  wn("decoder.conv_pre", {c.decoder_dim, ld, 7});
  p.push_back({"decoder.conv_pre.bias", {c.decoder_dim}});
  int64_t ch = c.decoder_dim;
  const size_t nk = c.resblock_kernel_sizes.size();
  for (size_t i = 0; i < c.decoder_rates.size(); ++i) {
    const std::string n = fmt::format("decoder.ups.{}.0", i);
    wn(n, {ch, ch / 2, c.decoder_kernel_sizes[i]});
    p.push_back({n + ".bias", {ch / 2}});
    ch /= 2;
    for (size_t j = 0; j < nk; ++j) {
      const std::string rn = fmt::format("decoder.resblocks.{}", i * nk + j);
      const int64_t k = c.resblock_kernel_sizes[j];
      for (size_t d = 0; d < c.resblock_dilation_sizes[j].size(); ++d) {
        for (const char* conv : {"convs1", "convs2"}) {
          wn(fmt::format("{}.{}.{}", rn, conv, d), {ch, ch, k});
          p.push_back({fmt::format("{}.{}.{}.bias", rn, conv, d), {ch}});
        }
        act(fmt::format("{}.activations.{}", rn, 2 * d), ch);
        act(fmt::format("{}.activations.{}", rn, 2 * d + 1), ch);
      }
    }
  }
  act("decoder.activation_post", ch);
  wn("decoder.conv_post", {1, ch, 7});
  return p;
}

std::vector<std::pair<std::string, Shape>> video_vae_encoder_parameters(const VideoVaeConfig& c) {
  const auto& ch = c.block_out_channels;
  const int64_t lc = c.latent_channels;
  std::vector<std::pair<std::string, Shape>> p = {{"encoder.conv_in.weight", {ch[0], c.in_channels, 3, 3, 3}},
                                                  {"encoder.conv_in.bias", {ch[0]}}};
  int64_t cin = ch[0];
  for (size_t l = 0; l < ch.size(); ++l) {
    for (int64_t i = 0; i < c.layers_per_block; ++i) {
      const std::string n = fmt::format("encoder.down_blocks.{}.resnets.{}.", l, i);
      const int64_t in = i == 0 ? cin : ch[l], out = ch[l];
      p.push_back({n + "norm1.weight", {in}});
      p.push_back({n + "norm1.bias", {in}});
      p.push_back({n + "conv1.weight", {out, in, 3, 3, 3}});
      p.push_back({n + "conv1.bias", {out}});
      p.push_back({n + "norm2.weight", {out}});
      p.push_back({n + "norm2.bias", {out}});
      p.push_back({n + "conv2.weight", {out, out, 3, 3, 3}});
      p.push_back({n + "conv2.bias", {out}});
      if (in != out) {
        p.push_back({n + "conv_shortcut.weight", {out, in, 1, 1, 1}});
        p.push_back({n + "conv_shortcut.bias", {out}});
      }
    }
    if (c.temporal_downsample_factors[l] * c.spatial_downsample_factors[l] > 1) {
      const std::string n = fmt::format("encoder.down_blocks.{}.downsamplers.0.conv.", l);
      p.push_back({n + "weight", {ch[l], ch[l], 3, 3, 3}});
      p.push_back({n + "bias", {ch[l]}});
    }
    cin = ch[l];
  }
  p.push_back({"encoder.norm_out.weight", {ch.back()}});
  p.push_back({"encoder.norm_out.bias", {ch.back()}});
  p.push_back({"encoder.conv_out.weight", {2 * lc, ch.back(), 3, 3, 3}});
  p.push_back({"encoder.conv_out.bias", {2 * lc}});
  p.push_back({"quant_conv.weight", {2 * lc, 2 * lc, 1, 1, 1}});
  p.push_back({"quant_conv.bias", {2 * lc}});
  return p;
}

std::vector<std::pair<std::string, Shape>> audio_vae_encoder_parameters(const AudioVaeConfig& c) {
  const int64_t lc = c.latent_channels, ld = c.latent_dim;
  std::vector<std::pair<std::string, Shape>> p;
  auto wn = [&](const std::string& n, const Shape& v) {
    p.push_back({n + ".weight_g", {v[0], 1, 1}});
    p.push_back({n + ".weight_v", v});
    p.push_back({n + ".bias", {v[0]}});
  };
  int64_t d = c.encoder_dim;
  wn("encoder.block.0", {d, 1, 7});
  for (size_t i = 0; i < c.encoder_rates.size(); ++i) {
    const std::string bn = fmt::format("encoder.block.{}.block", i + 1);
    for (int u = 0; u < 3; ++u) {
      const std::string un = fmt::format("{}.{}.block", bn, u);
      p.push_back({un + ".0.alpha", {1, d, 1}});
      wn(un + ".1", {d, d, 7});
      p.push_back({un + ".2.alpha", {1, d, 1}});
      wn(un + ".3", {d, d, 1});
    }
    p.push_back({bn + ".3.alpha", {1, d, 1}});
    wn(bn + ".4", {2 * d, d, 2 * c.encoder_rates[i]});
    d *= 2;
  }
  const size_t n = c.encoder_rates.size();
  p.push_back({fmt::format("encoder.block.{}.alpha", n + 1), {1, d, 1}});
  wn(fmt::format("encoder.block.{}", n + 2), {ld, d, 3});
  for (const char* nm : {"pre_block.norm1", "pre_block.norm3"}) {
    p.push_back({std::string(nm) + ".weight", {ld}});
    p.push_back({std::string(nm) + ".bias", {ld}});
  }
  p.push_back({"pre_block.norm2.weight", {lc}});
  p.push_back({"pre_block.norm2.bias", {lc}});
  p.push_back({"pre_block.attn.qkv.weight", {3 * ld, ld}});
  p.push_back({"pre_block.attn.q_bias", {ld}});
  p.push_back({"pre_block.attn.v_bias", {ld}});
  p.push_back({"pre_block.attn.proj.weight", {lc, lc}});
  p.push_back({"pre_block.attn.proj.bias", {lc}});
  p.push_back({"pre_block.proj.weight", {lc, ld}});
  p.push_back({"pre_block.proj.bias", {lc}});
  p.push_back({"pre_block.mlp.norm.weight", {lc}});
  p.push_back({"pre_block.mlp.norm.bias", {lc}});
  p.push_back({"pre_block.mlp.w0.weight", {2 * lc, lc}});
  p.push_back({"pre_block.mlp.w0.bias", {2 * lc}});
  p.push_back({"pre_block.mlp.w1.weight", {2 * lc, lc}});
  p.push_back({"pre_block.mlp.w1.bias", {2 * lc}});
  p.push_back({"pre_block.mlp.w2.weight", {lc, 2 * lc}});
  p.push_back({"pre_block.mlp.w2.bias", {lc}});
  p.push_back({"mean_proj.weight", {lc, lc, 1}});
  p.push_back({"mean_proj.bias", {lc}});
  return p;
}

namespace {

// BigVGAN's anti-aliasing filter (kaiser_sinc_filter1d(cutoff 0.25, half_width 0.3, 12 taps)): the resampling
// filters are fixed buffers in the released model, not learned, so random values would only make the
// procedural decoder alias needlessly.
Tensor kaiser_sinc_filter(int64_t taps) {
  const double cutoff = 0.25, half_width = 0.3;
  const int64_t half = taps / 2;
  const double delta_f = 4 * half_width;
  const double a = 2.285 * static_cast<double>(half - 1) * M_PI * delta_f + 7.95;
  const double beta = a > 50 ? 0.1102 * (a - 8.7) : a >= 21 ? 0.5842 * std::pow(a - 21, 0.4) + 0.07886 * (a - 21) : 0;
  std::vector<double> f(static_cast<size_t>(taps));
  double sum = 0;
  for (int64_t i = 0; i < taps; ++i) {
    const double r = 2.0 * static_cast<double>(i) / static_cast<double>(taps - 1) - 1.0;
    const double window =
        std::cyl_bessel_i(0.0, beta * std::sqrt(std::max(0.0, 1 - r * r))) / std::cyl_bessel_i(0.0, beta);
    const double t = static_cast<double>(i - half) + (taps % 2 == 0 ? 0.5 : 0.0);
    const double x = 2 * cutoff * t;
    const double sinc = x == 0 ? 1.0 : std::sin(M_PI * x) / (M_PI * x);
    f[static_cast<size_t>(i)] = 2 * cutoff * window * sinc;
    sum += f[static_cast<size_t>(i)];
  }
  std::vector<float> out(f.size());
  for (size_t i = 0; i < f.size(); ++i) out[i] = static_cast<float>(f[i] / sum);
  return Tensor::from(out, {1, 1, taps});
}

std::optional<Tensor> vae_fixed_tensor(const std::string& name, const Shape& shape) {
  return name.ends_with(".filter") ? std::optional<Tensor>(kaiser_sinc_filter(shape.back())) : std::nullopt;
}

}  // namespace

std::shared_ptr<SafeTensors> procedural_vae_file(const std::vector<std::pair<std::string, Shape>>& params,
                                                 uint64_t seed, const std::string& label) {
  return procedural_safetensors(params, {}, seed, label, vae_fixed_tensor);
}

namespace {

using Parameters = std::vector<std::pair<std::string, Shape>>;

// The decoder's parameters followed by the encoder's.
Parameters joined(Parameters decoder, const Parameters& encoder) {
  decoder.insert(decoder.end(), encoder.begin(), encoder.end());
  return decoder;
}

// The procedural VAE config `name`: mini, or full (the released configuration: the config's defaults).
template <typename Config>
Config named_vae_config(const std::string& name, Config (*mini)(), const std::string& what) {
  if (name == "mini") return mini();
  H3_CHECK(name == "full", "procedural {} '{}': known are mini and full", what, name);
  Config c;
  c.validate("procedural:full " + what);
  return c;
}

// The procedural VAE a spec names (parse_procedural_spec: mini or full, and the seed), with its encoder.
template <typename Vae, typename Config>
std::unique_ptr<Vae> procedural_vae(const std::string& spec, Precision precision, Device device, const char* what,
                                    Config (*config)(const std::string&),
                                    std::shared_ptr<ProceduralWeights> (*weights)(const Config&, uint64_t, bool,
                                                                                  const std::string&)) {
  const ProceduralSpec p = parse_procedural_spec(spec, what, {"mini", "full"});
  const Config c = config(p.name);
  const auto w = weights(c, p.seed, true, spec);
  return std::make_unique<Vae>(*w, "", c, precision, device);
}

}  // namespace

std::shared_ptr<ProceduralWeights> procedural_video_vae_weights(const VideoVaeConfig& c, uint64_t seed, bool encoder,
                                                                const std::string& label) {
  return std::make_shared<ProceduralWeights>(
      joined(video_vae_decoder_parameters(c), encoder ? video_vae_encoder_parameters(c) : Parameters{}), seed, label,
      vae_fixed_tensor);
}

std::shared_ptr<ProceduralWeights> procedural_audio_vae_weights(const AudioVaeConfig& c, uint64_t seed, bool encoder,
                                                                const std::string& label) {
  return std::make_shared<ProceduralWeights>(
      joined(audio_vae_decoder_parameters(c), encoder ? audio_vae_encoder_parameters(c) : Parameters{}), seed, label,
      vae_fixed_tensor);
}

VideoVaeConfig procedural_video_vae_config(const std::string& name) {
  return named_vae_config<VideoVaeConfig>(name, procedural_video_vae_config, "video VAE");
}

AudioVaeConfig procedural_audio_vae_config(const std::string& name) {
  return named_vae_config<AudioVaeConfig>(name, procedural_audio_vae_config, "audio VAE");
}

std::unique_ptr<VideoVae> procedural_video_vae(const std::string& spec, Precision precision, Device device,
                                               const char* what) {
  return procedural_vae<VideoVae, VideoVaeConfig>(spec, precision, device, what, procedural_video_vae_config,
                                                  procedural_video_vae_weights);
}

std::unique_ptr<AudioVae> procedural_audio_vae(const std::string& spec, Precision precision, Device device,
                                               const char* what) {
  return procedural_vae<AudioVae, AudioVaeConfig>(spec, precision, device, what, procedural_audio_vae_config,
                                                  procedural_audio_vae_weights);
}

std::unique_ptr<VideoVae> procedural_video_vae_full(uint64_t seed, Precision precision, Device device) {
  return procedural_video_vae(fmt::format("{}:seed={}", kProceduralFull, seed), precision, device);
}

std::unique_ptr<AudioVae> procedural_audio_vae_full(uint64_t seed, Precision precision, Device device) {
  return procedural_audio_vae(fmt::format("{}:seed={}", kProceduralFull, seed), precision, device);
}

std::shared_ptr<SafeTensors> procedural_video_vae_file(uint64_t seed) {
  const VideoVaeConfig c = procedural_video_vae_config();
  return procedural_vae_file(joined(video_vae_decoder_parameters(c), video_vae_encoder_parameters(c)), seed,
                             "procedural-video-vae");
}

std::shared_ptr<SafeTensors> procedural_audio_vae_file(uint64_t seed) {
  const AudioVaeConfig c = procedural_audio_vae_config();
  return procedural_vae_file(joined(audio_vae_decoder_parameters(c), audio_vae_encoder_parameters(c)), seed,
                             "procedural-audio-vae");
}

}  // namespace h3

#include "pipeline/procedural_models.h"

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

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

QwenTextConfig procedural_qwen_text_config() {
  QwenTextConfig c;
  c.vocab_size = 260;  // the built-in byte-level tokenizer: 256 bytes + 4 vision tokens
  c.hidden = 64;       // = text_dim of the mini DiT
  c.intermediate = 128;
  c.n_layers = 50;  // H3 conditions on hidden_states[50]
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.head_dim = 16;
  c.mrope_section = {2, 3, 3};
  return c;
}

QwenVisionConfig procedural_qwen_vision_config() {
  QwenVisionConfig c;
  // The released patch sizes (16 x 16 x 2, merge 2: the processor's grids are the released ones) with tiny
  // widths; three blocks, each feeding one DeepStack merger, so the injection into LM layers 0-2 is
  // exercised.
  c.depth = 3;
  c.hidden = 32;
  c.intermediate = 64;
  c.n_heads = 2;  // head dim 16 (the 2-D rotary needs a multiple of 4)
  c.out_hidden = procedural_qwen_text_config().hidden;
  c.n_pos = 16;  // a 4 x 4 learned position table, bilinearly sampled
  c.deepstack_indexes = {0, 1, 2};
  return c;
}

std::vector<std::pair<std::string, Shape>> qwen_vision_parameters(const QwenVisionConfig& c,
                                                                  const std::string& prefix) {
  const int64_t h = c.hidden, ff = c.intermediate, mh = h * c.merge * c.merge, out = c.out_hidden;
  std::vector<std::pair<std::string, Shape>> p = {
      {prefix + "patch_embed.proj.weight", {h, c.in_channels, c.temporal_patch, c.patch, c.patch}},
      {prefix + "patch_embed.proj.bias", {h}},
      {prefix + "pos_embed.weight", {c.n_pos, h}},
  };
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string b = fmt::format("{}blocks.{}.", prefix, i);
    p.push_back({b + "norm1.weight", {h}});
    p.push_back({b + "norm1.bias", {h}});
    p.push_back({b + "attn.qkv.weight", {3 * h, h}});
    p.push_back({b + "attn.qkv.bias", {3 * h}});
    p.push_back({b + "attn.proj.weight", {h, h}});
    p.push_back({b + "attn.proj.bias", {h}});
    p.push_back({b + "norm2.weight", {h}});
    p.push_back({b + "norm2.bias", {h}});
    p.push_back({b + "mlp.linear_fc1.weight", {ff, h}});
    p.push_back({b + "mlp.linear_fc1.bias", {ff}});
    p.push_back({b + "mlp.linear_fc2.weight", {h, ff}});
    p.push_back({b + "mlp.linear_fc2.bias", {h}});
  }
  auto merger = [&](const std::string& m, bool post_shuffle_norm) {
    p.push_back({m + "norm.weight", {post_shuffle_norm ? mh : h}});
    p.push_back({m + "norm.bias", {post_shuffle_norm ? mh : h}});
    p.push_back({m + "linear_fc1.weight", {mh, mh}});
    p.push_back({m + "linear_fc1.bias", {mh}});
    p.push_back({m + "linear_fc2.weight", {out, mh}});
    p.push_back({m + "linear_fc2.bias", {out}});
  };
  merger(prefix + "merger.", false);
  for (size_t k = 0; k < c.deepstack_indexes.size(); ++k)
    merger(fmt::format("{}deepstack_merger_list.{}.", prefix, k), true);
  return p;
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
  std::vector<std::pair<std::string, Shape>> p = {{"dec_in_proj.weight", {ld, lc, 1}},
                                                  {"dec_in_proj.bias", {ld}}};
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

std::vector<std::pair<std::string, Shape>> qwen_text_parameters(const QwenTextConfig& c) {
  const int64_t H = c.hidden, I = c.intermediate, hd = c.head_dim;
  std::vector<std::pair<std::string, Shape>> p = {{"embed_tokens.weight", {c.vocab_size, H}}};
  for (int64_t i = 0; i < c.n_layers; ++i) {
    const std::string n = fmt::format("layers.{}.", i);
    p.push_back({n + "input_layernorm.weight", {H}});
    p.push_back({n + "self_attn.q_proj.weight", {c.n_heads * hd, H}});
    p.push_back({n + "self_attn.k_proj.weight", {c.n_kv_heads * hd, H}});
    p.push_back({n + "self_attn.v_proj.weight", {c.n_kv_heads * hd, H}});
    p.push_back({n + "self_attn.o_proj.weight", {H, c.n_heads * hd}});
    p.push_back({n + "self_attn.q_norm.weight", {hd}});
    p.push_back({n + "self_attn.k_norm.weight", {hd}});
    p.push_back({n + "post_attention_layernorm.weight", {H}});
    p.push_back({n + "mlp.gate_proj.weight", {I, H}});
    p.push_back({n + "mlp.up_proj.weight", {I, H}});
    p.push_back({n + "mlp.down_proj.weight", {H, I}});
  }
  p.push_back({"norm.weight", {H}});
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
  const double beta = a > 50    ? 0.1102 * (a - 8.7)
                      : a >= 21 ? 0.5842 * std::pow(a - 21, 0.4) + 0.07886 * (a - 21)
                                : 0;
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

std::atomic<int> g_counter{0};

}  // namespace

std::shared_ptr<SafeTensors> procedural_safetensors(const std::vector<std::pair<std::string, Shape>>& params,
                                                    const std::map<std::string, std::string>& metadata,
                                                    uint64_t seed, const std::string& label) {
  namespace fs = std::filesystem;
  std::vector<std::pair<std::string, Tensor>> tensors;
  tensors.reserve(params.size());
  for (const auto& [name, shape] : params) {
    if (name.ends_with(".filter"))
      tensors.push_back({name, kaiser_sinc_filter(shape.back())});
    else
      tensors.push_back({name, procedural_tensor(name, shape, seed)});
  }
  std::error_code ec;
  fs::path dir = fs::temp_directory_path(ec);
  if (ec) dir = "/tmp";
  const fs::path path = dir / fmt::format("h3-{}-{}-{}.safetensors", label, ::getpid(), g_counter++);
  auto md = metadata;
  md["weights"] = fmt::format("procedural seed {}", seed);
  write_safetensors(path.string(), tensors, md);
  std::shared_ptr<SafeTensors> f;
  try {
    f = std::make_shared<SafeTensors>(SafeTensors::open(path.string()));
  } catch (...) {
    fs::remove(path, ec);
    throw;
  }
  // The mapping keeps the data alive; the name is not needed any more.
  fs::remove(path, ec);
  return f;
}

std::shared_ptr<SafeTensors> procedural_video_vae_file(uint64_t seed) {
  auto params = video_vae_decoder_parameters(procedural_video_vae_config());
  for (auto& p : video_vae_encoder_parameters(procedural_video_vae_config())) params.push_back(std::move(p));
  return procedural_safetensors(params, {}, seed, "procedural-video-vae");
}

std::shared_ptr<SafeTensors> procedural_audio_vae_file(uint64_t seed) {
  auto params = audio_vae_decoder_parameters(procedural_audio_vae_config());
  for (auto& p : audio_vae_encoder_parameters(procedural_audio_vae_config())) params.push_back(std::move(p));
  return procedural_safetensors(params, {}, seed, "procedural-audio-vae");
}

std::shared_ptr<SafeTensors> procedural_qwen_text_file(uint64_t seed) {
  const QwenTextConfig c = procedural_qwen_text_config();
  nlohmann::json cfg = {{"vocab_size", c.vocab_size},
                        {"hidden_size", c.hidden},
                        {"intermediate_size", c.intermediate},
                        {"num_hidden_layers", c.n_layers},
                        {"num_attention_heads", c.n_heads},
                        {"num_key_value_heads", c.n_kv_heads},
                        {"head_dim", c.head_dim},
                        {"rms_norm_eps", c.rms_eps},
                        {"rope_parameters",
                         {{"rope_type", "default"},
                          {"mrope_section", {c.mrope_section[0], c.mrope_section[1], c.mrope_section[2]}},
                          {"mrope_interleaved", c.mrope_interleaved},
                          {"rope_theta", c.rope_theta}}}};
  // The vision tower sits beside the decoder as in a Qwen3-VL checkpoint ("visual." next to the text keys).
  const QwenVisionConfig v = procedural_qwen_vision_config();
  cfg["vision_config"] = {{"depth", v.depth},
                          {"hidden_size", v.hidden},
                          {"intermediate_size", v.intermediate},
                          {"num_heads", v.n_heads},
                          {"in_channels", v.in_channels},
                          {"patch_size", v.patch},
                          {"temporal_patch_size", v.temporal_patch},
                          {"spatial_merge_size", v.merge},
                          {"out_hidden_size", v.out_hidden},
                          {"num_position_embeddings", v.n_pos},
                          {"deepstack_visual_indexes", v.deepstack_indexes},
                          {"hidden_act", "gelu_pytorch_tanh"}};
  auto params = qwen_text_parameters(c);
  for (auto& q : qwen_vision_parameters(v, "visual.")) params.push_back(std::move(q));
  return procedural_safetensors(params, {{"config", cfg.dump()}}, seed, "procedural-qwen3-vl");
}

std::string builtin_tokenizer_json() {
  // GPT-2's byte-to-printable map: printable Latin-1 bytes stand for themselves, the rest take 256, 257, ...
  nlohmann::json vocab = nlohmann::json::object();
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255);
    const int cp = printable ? b : next++;
    std::string s;
    if (cp < 0x80) {
      s.push_back(static_cast<char>(cp));
    } else {
      s.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      s.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
    vocab[s] = b;
  }
  nlohmann::json j = {
      {"version", "1.0"},
      {"normalizer", {{"type", "NFC"}}},
      {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", true}}},
      {"decoder", {{"type", "ByteLevel"}}},
      // Qwen's vision tokens (real ids 151652/151653/151655/151656) at the ids after the bytes, so prompts
      // with keyframes and references tokenise as the released tokenizer's do.
      {"added_tokens",
       {{{"id", 256}, {"content", "<|vision_start|>"}, {"special", true}},
        {{"id", 257}, {"content", "<|vision_end|>"}, {"special", true}},
        {{"id", 258}, {"content", "<|image_pad|>"}, {"special", true}},
        {{"id", 259}, {"content", "<|video_pad|>"}, {"special", true}}}},
      {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}},
  };
  return j.dump();
}

uint64_t procedural_mini_seed(const std::string& spec, const char* what) {
  const auto k = spec.find(":seed=");
  const std::string name = spec.substr(11, k == std::string::npos ? std::string::npos : k - 11);
  H3_CHECK(name == "mini", "{} '{}': only procedural:mini[:seed=N] exists for this component", what, spec);
  if (k == std::string::npos) return kDefaultProceduralSeed;
  try {
    return std::stoull(spec.substr(k + 6));
  } catch (const std::exception&) {
    fail("{}: the seed after ':seed=' is not a number", spec);
  }
}

}  // namespace h3

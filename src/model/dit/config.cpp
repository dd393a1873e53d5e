#include "model/dit/config.h"

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/json_limits.h"

namespace h3 {

std::optional<DitConfig> DitConfig::named(const std::string& name) {
  DitConfig c;
  if (name == "full") return c;
  if (name == "fullwidth-1block") {
    c.num_layers = 1;
    c.num_refiner_layers = 1;
    return c;
  }
  if (name == "mini") {
    c.num_attention_heads = 14;
    c.attention_head_dim = 32;
    c.hidden_size = 96;
    c.num_layers = 3;
    c.num_refiner_layers = 2;
    c.ffn_dim = 160;
    c.text_dim = 64;
    c.freq_dim = 32;
    c.time_embed_hidden_dim = 96;
    c.time_embed_dim = 48;
    c.rope_freq_dim = 4;
    return c;
  }
  return std::nullopt;
}

namespace {
// Both the diffusers names and the released checkpoint's names are accepted.
void read_int(const nlohmann::json& j, std::initializer_list<const char*> names, int& out, const std::string& where) {
  for (const char* n : names) {
    if (!j.contains(n)) continue;
    if (!j[n].is_number_integer() || j[n].get<int64_t>() <= 0 || j[n].get<int64_t>() > (1 << 24))
      fail("{}: config field '{}' must be a positive integer, got {}", where, n, j[n].dump());
    out = j[n].get<int>();
    return;
  }
}
void read_double(const nlohmann::json& j, std::initializer_list<const char*> names, double& out,
                 const std::string& where) {
  for (const char* n : names) {
    if (!j.contains(n)) continue;
    if (!j[n].is_number() || j[n].get<double>() <= 0)
      fail("{}: config field '{}' must be a positive number, got {}", where, n, j[n].dump());
    out = j[n].get<double>();
    return;
  }
}
}  // namespace

DitConfig DitConfig::from_json_text(const std::string& text, const std::string& where) {
  nlohmann::json j;
  try {
    j = parse_json_bounded(text, where + ": config");
  } catch (const nlohmann::json::exception& e) {
    fail("{}: config is not valid JSON: {}", where, e.what());
  }
  if (!j.is_object()) fail("{}: config must be a JSON object", where);
  DitConfig c;
  read_int(j, {"num_attention_heads"}, c.num_attention_heads, where);
  read_int(j, {"attention_head_dim"}, c.attention_head_dim, where);
  read_int(j, {"hidden_size"}, c.hidden_size, where);
  read_int(j, {"num_layers"}, c.num_layers, where);
  read_int(j, {"num_refiner_layers", "token_refiner_num_layers"}, c.num_refiner_layers, where);
  read_int(j, {"ffn_dim", "ffn_hidden_size"}, c.ffn_dim, where);
  read_int(j, {"in_channels", "latents_dim"}, c.in_channels, where);
  read_int(j, {"audio_in_channels", "audio_latents_dim"}, c.audio_in_channels, where);
  read_int(j, {"text_dim"}, c.text_dim, where);
  read_int(j, {"freq_dim", "timestep_input_dim"}, c.freq_dim, where);
  read_int(j, {"time_embed_hidden_dim", "time_embed_hidden_size"}, c.time_embed_hidden_dim, where);
  read_int(j, {"time_embed_dim"}, c.time_embed_dim, where);
  read_int(j, {"rope_freq_dim", "rope_inv_freq_len"}, c.rope_freq_dim, where);
  read_double(j, {"rope_theta"}, c.rope_theta, where);
  read_double(j, {"norm_eps"}, c.norm_eps, where);
  read_double(j, {"qk_norm_eps"}, c.qk_norm_eps, where);
  read_double(j, {"final_norm_eps"}, c.final_norm_eps, where);
  if (j.contains("patch_size")) {
    const auto& p = j["patch_size"];
    if (!p.is_array() || p.size() != 3 || !p[0].is_number_integer() || !p[1].is_number_integer() ||
        !p[2].is_number_integer())
      fail("{}: config field 'patch_size' must be three integers, got {}", where, p.dump());
    c.patch_t = p[0].get<int>();
    c.patch_h = p[1].get<int>();
    c.patch_w = p[2].get<int>();
  }
  c.validate(where);
  return c;
}

std::string DitConfig::to_json_text() const {
  nlohmann::json j = {{"num_attention_heads", num_attention_heads},
                      {"attention_head_dim", attention_head_dim},
                      {"hidden_size", hidden_size},
                      {"num_layers", num_layers},
                      {"num_refiner_layers", num_refiner_layers},
                      {"ffn_dim", ffn_dim},
                      {"in_channels", in_channels},
                      {"audio_in_channels", audio_in_channels},
                      {"patch_size", {patch_t, patch_h, patch_w}},
                      {"text_dim", text_dim},
                      {"freq_dim", freq_dim},
                      {"time_embed_hidden_dim", time_embed_hidden_dim},
                      {"time_embed_dim", time_embed_dim},
                      {"rope_freq_dim", rope_freq_dim},
                      {"rope_theta", rope_theta}};
  return j.dump();
}

void DitConfig::validate(const std::string& where) const {
  // Generous bounds (the released model is far inside them) that keep every size in int range.
  const std::pair<const char*, int> sizes[] = {{"num_attention_heads", num_attention_heads},
                                               {"attention_head_dim", attention_head_dim},
                                               {"hidden_size", hidden_size},
                                               {"ffn_dim", ffn_dim},
                                               {"in_channels", in_channels},
                                               {"audio_in_channels", audio_in_channels},
                                               {"text_dim", text_dim},
                                               {"freq_dim", freq_dim},
                                               {"time_embed_hidden_dim", time_embed_hidden_dim},
                                               {"time_embed_dim", time_embed_dim},
                                               {"rope_freq_dim", rope_freq_dim}};
  for (const auto& [name, v] : sizes)
    if (v < 1 || v > (1 << 16)) fail("{}: config {} = {} is outside [1, 65536]", where, name, v);
  if (num_layers < 0 || num_layers > 1024 || num_refiner_layers < 0 || num_refiner_layers > 64)
    fail("{}: config has {} layers and {} refiner layers (allowed: up to 1024 and 64)", where, num_layers,
         num_refiner_layers);
  if (static_cast<int64_t>(num_attention_heads) * attention_head_dim > (1 << 20))
    fail("{}: {} heads x {} is wider than 2^20", where, num_attention_heads, attention_head_dim);
  if (rotary_dim() > attention_head_dim)
    fail("{}: rope_freq_dim {} rotates {} channels, more than attention_head_dim {}", where, rope_freq_dim,
         rotary_dim(), attention_head_dim);
  if (freq_dim % 2 != 0) fail("{}: freq_dim {} must be even", where, freq_dim);
  if (patch_t != 1 || patch_h != 2 || patch_w != 2)
    fail("{}: patch_size [{}, {}, {}] is not supported (H3 uses [1, 2, 2])", where, patch_t, patch_h, patch_w);
}

std::vector<std::pair<std::string, Shape>> DitConfig::parameters() const {
  const int64_t H = hidden_size, I = inner_dim(), F = ffn_dim, D = attention_head_dim, E = time_embed_dim;
  std::vector<std::pair<std::string, Shape>> p = {
      {"proj_in.weight", {H, video_patch_dim()}},
      {"proj_in.bias", {H}},
      {"audio_proj_in.weight", {H, audio_in_channels}},
      {"audio_proj_in.bias", {H}},
      {"context_embedder.weight", {H, text_dim}},
      {"context_embedder.bias", {H}},
      {"time_embedder.linear_1.weight", {time_embed_hidden_dim, freq_dim}},
      {"time_embedder.linear_1.bias", {time_embed_hidden_dim}},
      {"time_embedder.linear_2.weight", {E, time_embed_hidden_dim}},
      {"time_embedder.linear_2.bias", {E}},
  };
  auto block = [&](const std::string& b) {
    p.push_back({b + "norm1.weight", {H}});
    p.push_back({b + "attn.to_q.weight", {I, H}});
    p.push_back({b + "attn.to_k.weight", {I, H}});
    p.push_back({b + "attn.to_v.weight", {I, H}});
    p.push_back({b + "attn.norm_q.weight", {D}});
    p.push_back({b + "attn.norm_k.weight", {D}});
    p.push_back({b + "attn.to_out.0.weight", {H, I}});
    p.push_back({b + "norm2.weight", {H}});
    p.push_back({b + "ff.net.0.proj.weight", {2 * F, H}});
    p.push_back({b + "ff.net.2.weight", {H, F}});
  };
  for (int r = 0; r < num_refiner_layers; ++r) block("token_refiner.refiner_blocks." + std::to_string(r) + ".");
  p.push_back({"token_refiner.final_norm.weight", {H}});
  for (int n = 0; n < num_layers; ++n) {
    std::string b = "transformer_blocks." + std::to_string(n) + ".";
    block(b);
    p.push_back({b + "adaln_proj.linear.weight", {18 * H, E}});
    p.push_back({b + "adaln_proj.linear.bias", {18 * H}});
  }
  p.push_back({"norm_out.norm.weight", {H}});
  p.push_back({"norm_out.linear.weight", {2 * H, E}});
  p.push_back({"norm_out.linear.bias", {2 * H}});
  p.push_back({"proj_out.weight", {video_patch_dim(), H}});
  p.push_back({"proj_out.bias", {video_patch_dim()}});
  p.push_back({"audio_proj_out.weight", {audio_in_channels, H}});
  p.push_back({"audio_proj_out.bias", {audio_in_channels}});
  return p;
}

int64_t DitConfig::parameter_count() const {
  int64_t n = 0;
  for (const auto& [k, s] : parameters()) n += shape_numel(s);
  return n;
}

}  // namespace h3

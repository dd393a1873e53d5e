#include "model/qwen3vl/procedural.h"

#include <nlohmann/json.hpp>

#include "io/procedural.h"

namespace h3 {

Qwen3VlTextConfig procedural_qwen3vl_text_config() {
  Qwen3VlTextConfig c;
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

Qwen3VlVisionConfig procedural_qwen3vl_vision_config() {
  Qwen3VlVisionConfig c;
  // The released patch sizes (16 x 16 x 2, merge 2: the processor's grids are the released ones) with tiny
  // widths; three blocks, each feeding one DeepStack merger, so the injection into LM layers 0-2 is
  // exercised.
  c.depth = 3;
  c.hidden = 32;
  c.intermediate = 64;
  c.n_heads = 2;  // head dim 16 (the 2-D rotary needs a multiple of 4)
  c.out_hidden = procedural_qwen3vl_text_config().hidden;
  c.n_pos = 16;  // a 4 x 4 learned position table, bilinearly sampled
  c.deepstack_indexes = {0, 1, 2};
  return c;
}

std::vector<std::pair<std::string, Shape>> qwen3vl_vision_parameters(const Qwen3VlVisionConfig& c,
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

std::vector<std::pair<std::string, Shape>> qwen3vl_text_parameters(const Qwen3VlTextConfig& c) {
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

// config.json of a Qwen3-VL with these towers (transformers' names).
std::string qwen3vl_config_json(const Qwen3VlTextConfig& c, const Qwen3VlVisionConfig& v) {
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
  return cfg.dump();
}

std::vector<std::pair<std::string, Shape>> qwen3vl_parameters(const Qwen3VlTextConfig& c,
                                                              const Qwen3VlVisionConfig& v) {
  auto params = qwen3vl_text_parameters(c);
  for (auto& q : qwen3vl_vision_parameters(v, "visual.")) params.push_back(std::move(q));
  return params;
}

}  // namespace

std::shared_ptr<SafeTensors> procedural_qwen3vl_text_file(uint64_t seed) {
  const Qwen3VlTextConfig c = procedural_qwen3vl_text_config();
  const Qwen3VlVisionConfig v = procedural_qwen3vl_vision_config();
  return procedural_safetensors(qwen3vl_parameters(c, v), {{"config", qwen3vl_config_json(c, v)}}, seed,
                                "procedural-qwen3-vl");
}

Qwen3VlTextWeights procedural_qwen3vl_full(uint64_t seed) {
  const Qwen3VlTextConfig c;    // the released text tower
  const Qwen3VlVisionConfig v;  // and vision tower
  return Qwen3VlTextWeights::procedural(qwen3vl_parameters(c, v), qwen3vl_config_json(c, v), seed,
                                        fmt::format("procedural:full:seed={}", seed));
}

Qwen3VlTextWeights procedural_qwen3vl(const std::string& spec, const char* what) {
  const ProceduralSpec p = parse_procedural_spec(spec, what, {"mini", "full"});
  if (p.name == "mini") return Qwen3VlTextWeights::from_file(procedural_qwen3vl_text_file(p.seed));
  return procedural_qwen3vl_full(p.seed);
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

}  // namespace h3

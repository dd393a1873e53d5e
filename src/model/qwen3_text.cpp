// Qwen3-VL text decoder on the CPU (see qwen3_text.h for the precision flow).
#include "model/qwen3_text.h"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/parallel.h"
#include "ops/ops.h"
#include "ops/ops_conv.h"

namespace h3 {

namespace {

using json = nlohmann::json;

template <typename T>
void read_if(const json& j, const char* key, T& out) {
  if (j.contains(key) && !j[key].is_null()) out = j[key].get<T>();
}

void read_rope(const json& r, QwenTextConfig& c) {
  if (!r.is_object()) return;
  read_if(r, "rope_theta", c.rope_theta);
  read_if(r, "mrope_interleaved", c.mrope_interleaved);
  if (r.contains("mrope_section")) {
    const auto s = r["mrope_section"].get<std::vector<int64_t>>();
    if (s.size() != 3) fail("mrope_section has {} entries, expected 3", s.size());
    c.mrope_section = {s[0], s[1], s[2]};
  }
}

// cos/sin [N, D] for rotate-half RoPE over the whole head (the D/2 frequencies repeated twice). Frequency j
// follows position axis a(j): interleaved, j % 3 == 1 (j < 3*sec[1]) is h, j % 3 == 2 (j < 3*sec[2]) is w,
// all others t; blocked (Qwen2-VL), the first sec[0] are t, the next sec[1] h, the rest w.
std::pair<Tensor, Tensor> mrope_tables(const QwenTextConfig& c, int64_t n, const std::vector<int64_t>* pos,
                                       DType dt) {
  const int64_t d = c.head_dim, half = d / 2;
  std::vector<int> axis(half, 0);
  for (int64_t j = 0; j < half; ++j) {
    if (c.mrope_interleaved) {
      if (j % 3 == 1 && j < 3 * c.mrope_section[1])
        axis[j] = 1;
      else if (j % 3 == 2 && j < 3 * c.mrope_section[2])
        axis[j] = 2;
    } else {
      axis[j] = j < c.mrope_section[0] ? 0 : j < c.mrope_section[0] + c.mrope_section[1] ? 1 : 2;
    }
  }
  // inv_freq and the positions are rounded to f32 as in the reference; the products and cos/sin are taken in
  // the run's dtype.
  std::vector<float> inv_freq(half);
  for (int64_t j = 0; j < half; ++j)
    inv_freq[j] =
        1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * j) / static_cast<float>(d));
  Tensor cos_t(dt, {n, d}), sin_t(dt, {n, d});
  auto fill = [&]<typename T>(T) {
    T* cp = cos_t.data<T>();
    T* sp = sin_t.data<T>();
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < half; ++j) {
        const T p = static_cast<float>(pos ? (*pos)[axis[j] * n + i] : i);
        const T angle = static_cast<T>(inv_freq[j]) * p;
        cp[i * d + j] = cp[i * d + j + half] = std::cos(angle);
        sp[i * d + j] = sp[i * d + j + half] = std::sin(angle);
      }
  };
  if (dt == DType::f32)
    fill(float{});
  else
    fill(double{});
  return {cos_t, sin_t};
}

}  // namespace

QwenTextConfig QwenTextConfig::from_json_text(const std::string& text, const std::string& where) {
  QwenTextConfig c;
  try {
    json j = json::parse(text);
    if (j.contains("text_config") && j["text_config"].is_object()) j = j["text_config"];
    read_if(j, "vocab_size", c.vocab_size);
    read_if(j, "hidden_size", c.hidden);
    read_if(j, "intermediate_size", c.intermediate);
    read_if(j, "num_hidden_layers", c.n_layers);
    read_if(j, "num_attention_heads", c.n_heads);
    read_if(j, "num_key_value_heads", c.n_kv_heads);
    if (j.contains("head_dim") && !j["head_dim"].is_null())
      c.head_dim = j["head_dim"].get<int64_t>();
    else if (j.contains("hidden_size"))
      c.head_dim = c.hidden / c.n_heads;
    read_if(j, "rms_norm_eps", c.rms_eps);
    read_if(j, "rope_theta", c.rope_theta);
    if (j.contains("rope_scaling")) read_rope(j["rope_scaling"], c);
    if (j.contains("rope_parameters")) read_rope(j["rope_parameters"], c);
  } catch (const json::exception& e) {
    fail("{}: cannot read the Qwen3-VL text config: {}", where, e.what());
  } catch (const Error& e) {
    fail("{}: {}", where, e.what());
  }
  return c;
}

std::string QwenTextConfig::summary() const {
  return fmt::format(
      "Qwen3-VL text: {} layers, hidden {}, {} heads / {} KV heads x {}, ffn {}, vocab {}, eps {}, "
      "theta {}, mrope [{},{},{}]{}",
      n_layers, hidden, n_heads, n_kv_heads, head_dim, intermediate, vocab_size, rms_eps, rope_theta,
      mrope_section[0], mrope_section[1], mrope_section[2], mrope_interleaved ? " interleaved" : "");
}

std::string qwen_text_prefix(const SafeTensors& f) {
  for (const auto& k : f.keys()) {
    if (!k.ends_with("embed_tokens.weight") || k.find("visual") != std::string::npos) continue;
    const std::string p = k.substr(0, k.size() - 19);
    if (f.has(p + "layers.0.self_attn.q_norm.weight")) return p;
  }
  fail(
      "{}: no Qwen3 text decoder found (no '*embed_tokens.weight' with 'layers.0.self_attn.q_norm.weight' "
      "next "
      "to it)",
      f.path());
}

QwenTextConfig detect_qwen_text_config(const SafeTensors& f) {
  const std::string p = qwen_text_prefix(f);
  QwenTextConfig c = f.meta("config").empty() ? QwenTextConfig{}
                                              : QwenTextConfig::from_json_text(f.meta("config"), f.path());
  const Shape& emb = f.info(p + "embed_tokens.weight").shape;
  c.vocab_size = emb.at(0);
  c.hidden = emb.at(1);
  c.head_dim = f.info(p + "layers.0.self_attn.q_norm.weight").shape.at(0);
  c.n_heads = f.info(p + "layers.0.self_attn.q_proj.weight").shape.at(0) / c.head_dim;
  c.n_kv_heads = f.info(p + "layers.0.self_attn.k_proj.weight").shape.at(0) / c.head_dim;
  c.intermediate = f.info(p + "layers.0.mlp.gate_proj.weight").shape.at(0);
  int64_t layers = 0;
  while (f.has(p + "layers." + std::to_string(layers) + ".input_layernorm.weight")) ++layers;
  c.n_layers = layers;
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0)
    fail("{}: {} query heads are not a multiple of {} KV heads", f.path(), c.n_heads, c.n_kv_heads);
  return c;
}

QwenTextModel::QwenTextModel(const SafeTensors& f, const QwenTextConfig& cfg, int64_t n_layers,
                             Precision precision)
    : cfg_(cfg) {
  if (precision == Precision::bf16)
    fail(
        "Qwen3-VL text tower: bf16 compute is not implemented; use f32 (what the reference conditioner "
        "runs)");
  dtype_ = precision == Precision::f64 ? DType::f64 : DType::f32;
  if (n_layers < 0) n_layers = cfg.n_layers;
  if (n_layers > cfg.n_layers)
    fail("{}: {} decoder layers requested, the model has {}", f.path(), n_layers, cfg.n_layers);
  const std::string p = qwen_text_prefix(f);
  std::vector<std::string> problems;
  auto load = [&](const std::string& key, const Shape& shape) -> Tensor {
    const std::string full = p + key;
    if (!f.has(full)) {
      problems.push_back("missing " + full);
      return {};
    }
    if (f.info(full).shape != shape) {
      problems.push_back(
          fmt::format("{} is {}, expected {}", full, shape_str(f.info(full).shape), shape_str(shape)));
      return {};
    }
    return f.get(full).to(dtype_);
  };
  const int64_t h = cfg.hidden, qd = cfg.n_heads * cfg.head_dim, kd = cfg.n_kv_heads * cfg.head_dim;
  const int64_t ff = cfg.intermediate;
  embed_ = load("embed_tokens.weight", {cfg.vocab_size, h});
  for (int64_t i = 0; i < n_layers; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    Layer L;
    L.in_norm = load(l + "input_layernorm.weight", {h});
    L.q = load(l + "self_attn.q_proj.weight", {qd, h});
    L.k = load(l + "self_attn.k_proj.weight", {kd, h});
    L.v = load(l + "self_attn.v_proj.weight", {kd, h});
    L.o = load(l + "self_attn.o_proj.weight", {h, qd});
    L.q_norm = load(l + "self_attn.q_norm.weight", {cfg.head_dim});
    L.k_norm = load(l + "self_attn.k_norm.weight", {cfg.head_dim});
    L.post_norm = load(l + "post_attention_layernorm.weight", {h});
    Tensor up = load(l + "mlp.up_proj.weight", {ff, h});
    Tensor gate = load(l + "mlp.gate_proj.weight", {ff, h});
    L.down = load(l + "mlp.down_proj.weight", {h, ff});
    if (up.defined() && gate.defined() && up.numel() && gate.numel()) {
      // [up; gate] so that one GEMM feeds ops::swiglu's [value; gate] layout.
      L.up_gate = Tensor(dtype_, {2 * ff, h});
      const size_t half = up.nbytes();
      std::copy_n(static_cast<const std::byte*>(up.raw()), half, static_cast<std::byte*>(L.up_gate.raw()));
      std::copy_n(static_cast<const std::byte*>(gate.raw()), half,
                  static_cast<std::byte*>(L.up_gate.raw()) + half);
    }
    layers_.push_back(std::move(L));
  }
  if (n_layers == cfg.n_layers) final_norm_ = load("norm.weight", {h});
  if (!problems.empty()) {
    std::string list;
    for (const auto& s : problems) list += "\n  " + s;
    fail("{}: the Qwen3-VL text decoder ({}) does not load: {} problem(s):{}", f.path(), cfg.summary(),
         problems.size(), list);
  }
}

QwenTextOutputs QwenTextModel::forward(const std::vector<int32_t>& ids, const std::vector<int64_t>& keep,
                                       bool want_normed, const std::vector<int64_t>* mrope_positions) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t last = 0;
  for (int64_t k : keep) {
    if (k < 0 || k > layers_loaded())
      fail("Qwen3-VL text: hidden_states[{}] requested, {} layers loaded (0..{} available)", k,
           layers_loaded(), layers_loaded());
    last = std::max(last, k);
  }
  if (want_normed) {
    if (layers_loaded() != cfg_.n_layers || !final_norm_.numel())
      fail("Qwen3-VL text: the normed last state needs all {} layers and the final norm loaded ({} loaded)",
           cfg_.n_layers, layers_loaded());
    last = layers_loaded();
  }
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      fail("Qwen3-VL text: token id {} at position {} is outside the vocabulary [0, {})", ids[i], i,
           cfg_.vocab_size);
  if (mrope_positions && static_cast<int64_t>(mrope_positions->size()) != 3 * n)
    fail("Qwen3-VL text: {} mRoPE positions for {} tokens (need 3 x N)", mrope_positions->size(), n);

  QwenTextOutputs out;
  Tensor x = ops::gather_rows(embed_, Tensor::from(ids, {n}));
  if (std::find(keep.begin(), keep.end(), 0) != keep.end()) out.hidden_states[0] = x.clone();
  if (n == 0) {
    for (int64_t k : keep) out.hidden_states[k] = x;
    if (want_normed) out.last_normed = x;
    return out;
  }
  auto [cos, sin] = mrope_tables(cfg_, n, mrope_positions, dtype_);
  const double eps = cfg_.rms_eps;
  const int64_t hd = cfg_.head_dim;
  for (int64_t li = 0; li < last; ++li) {
    const Layer& L = layers_[li];
    Tensor h = ops::rms_norm(x, &L.in_norm, cfg_.hidden, eps);
    Tensor q = ops::rms_norm(ops::linear(h, L.q), &L.q_norm, hd, eps);
    Tensor k = ops::rms_norm(ops::linear(h, L.k), &L.k_norm, hd, eps);
    Tensor v = ops::linear(h, L.v);
    q = ops::rope(q, cos, sin, hd, false);
    k = ops::rope(k, cos, sin, hd, false);
    Tensor a = ops::attention_causal(q, k, v, hd);
    x = ops::add(x, ops::linear(a, L.o));
    h = ops::rms_norm(x, &L.post_norm, cfg_.hidden, eps);
    x = ops::add(x, ops::linear(ops::swiglu(ops::linear(h, L.up_gate), false), L.down));
    if (std::find(keep.begin(), keep.end(), li + 1) != keep.end()) out.hidden_states[li + 1] = x;
  }
  if (want_normed) out.last_normed = ops::rms_norm(x, &final_norm_, cfg_.hidden, eps);
  return out;
}

Tensor QwenTextModel::hidden_state(const std::vector<int32_t>& ids, int64_t k) const {
  return forward(ids, {k}, false).hidden_states.at(k);
}

}  // namespace h3

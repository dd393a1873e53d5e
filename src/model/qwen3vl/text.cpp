// Qwen3-VL text decoder: config, loading (whole or one rank's units) and the forward driver. The unit work and
// the tensor-parallel fold live in model/qwen3vl/text_tp.cpp; model/qwen3vl/text.h describes both.
#include "model/qwen3vl/text.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/device.h"
#include "core/json.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/parallel.h"
#include "core/ref_math.h"
#include "ops/ops.h"

namespace h3 {

namespace {

using json = nlohmann::json;

void read_rope(const json& r, Qwen3VlTextConfig& c) {
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
std::pair<Tensor, Tensor> mrope_tables(const Qwen3VlTextConfig& c, int64_t n, const std::vector<int64_t>* pos,
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
  // inv_freq and the positions are rounded to f32 as in the reference, and so are the products and cos/sin
  // (the f64 run's tables hold those f32 values; the f32 run keeps its own std::cos/std::sin).
  std::vector<float> inv_freq(half);
  for (int64_t j = 0; j < half; ++j)
    inv_freq[j] = 1.0f / std::pow(static_cast<float>(c.rope_theta), static_cast<float>(2 * j) / static_cast<float>(d));
  if (dt == DType::f64) {
    // The f64 run: transformers' rotary takes `inv_freq.float() @ positions.float()` and cos/sin in f32
    // (autocast off, "Force float32"), then casts the tables to the run's dtype. ATen's f32 cos/sin are
    // ref_math's (VML when present).
    std::vector<float> angle(static_cast<size_t>(n * d)), cs(angle.size()), sn(angle.size());
    for (int64_t i = 0; i < n; ++i)
      for (int64_t j = 0; j < half; ++j) {
        const float p = static_cast<float>(pos ? (*pos)[axis[j] * n + i] : i);
        angle[i * d + j] = angle[i * d + j + half] = inv_freq[j] * p;
      }
    ref_math::cos_f32(angle.data(), cs.data(), n * d);
    ref_math::sin_f32(angle.data(), sn.data(), n * d);
    Tensor cos_t(DType::f64, {n, d}), sin_t(DType::f64, {n, d});
    for (int64_t k = 0; k < n * d; ++k) {
      cos_t.data<double>()[k] = cs[k];
      sin_t.data<double>()[k] = sn[k];
    }
    return {cos_t, sin_t};
  }
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

Qwen3VlTextConfig Qwen3VlTextConfig::from_json_text(const std::string& text, const std::string& where) {
  Qwen3VlTextConfig c;
  try {
    json j = parse_json_bounded(text, where);
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

std::string Qwen3VlTextConfig::summary() const {
  return fmt::format(
      "Qwen3-VL text: {} layers, hidden {}, {} heads / {} KV heads x {}, ffn {}, vocab {}, eps {}, "
      "theta {}, mrope [{},{},{}]{}",
      n_layers, hidden, n_heads, n_kv_heads, head_dim, intermediate, vocab_size, rms_eps, rope_theta, mrope_section[0],
      mrope_section[1], mrope_section[2], mrope_interleaved ? " interleaved" : "");
}

std::string qwen3vl_text_prefix(const Qwen3VlTextWeights& w) {
  for (const auto& k : w.keys()) {
    if (!k.ends_with("embed_tokens.weight") || k.find("visual") != std::string::npos) continue;
    const std::string p = k.substr(0, k.size() - 19);
    if (w.has(p + "layers.0.self_attn.q_norm.weight")) return p;
  }
  fail(
      "{}: no Qwen3 text decoder found (no '*embed_tokens.weight' with 'layers.0.self_attn.q_norm.weight' "
      "next to it)",
      w.path());
}

std::string qwen3vl_text_prefix(const SafeTensors& f) {
  return qwen3vl_text_prefix(Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f)));
}

Qwen3VlTextConfig detect_qwen3vl_text_config(const Qwen3VlTextWeights& w) {
  const std::string p = qwen3vl_text_prefix(w);
  Qwen3VlTextConfig c =
      w.config_json().empty() ? Qwen3VlTextConfig{} : Qwen3VlTextConfig::from_json_text(w.config_json(), w.path());
  const Shape& emb = w.info(p + "embed_tokens.weight").shape;
  c.vocab_size = emb.at(0);
  c.hidden = emb.at(1);
  c.head_dim = w.info(p + "layers.0.self_attn.q_norm.weight").shape.at(0);
  c.n_heads = w.info(p + "layers.0.self_attn.q_proj.weight").shape.at(0) / c.head_dim;
  c.n_kv_heads = w.info(p + "layers.0.self_attn.k_proj.weight").shape.at(0) / c.head_dim;
  c.intermediate = w.info(p + "layers.0.mlp.gate_proj.weight").shape.at(0);
  int64_t layers = 0;
  while (w.has(p + "layers." + std::to_string(layers) + ".input_layernorm.weight")) ++layers;
  c.n_layers = layers;
  if (c.n_kv_heads == 0 || c.n_heads % c.n_kv_heads != 0)
    fail("{}: {} query heads are not a multiple of {} KV heads", w.path(), c.n_heads, c.n_kv_heads);
  return c;
}

Qwen3VlTextConfig detect_qwen3vl_text_config(const SafeTensors& f) {
  return detect_qwen3vl_text_config(Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f)));
}

Qwen3VlTextModel::Qwen3VlTextModel(const SafeTensors& f, const Qwen3VlTextConfig& cfg, int64_t n_layers,
                                   Precision precision)
    : Qwen3VlTextModel(Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f)), cfg, n_layers,
                       Qwen3VlTextOptions{precision, Device::cpu, nullptr}) {}

Qwen3VlTextModel::~Qwen3VlTextModel() = default;

namespace {

// [a; b] along rows, on their device.
Tensor stack_rows(const Tensor& a, const Tensor& b) {
  Shape shape = a.shape();
  shape[0] += b.dim(0);
  Tensor out = Tensor::empty(a.dtype(), shape, a.device());
  auto* dst = static_cast<std::byte*>(out.raw());
  if (a.on_device()) {
    device_hooks().copy(dst, true, a.raw(), true, a.nbytes());
    device_hooks().copy(dst + a.nbytes(), true, b.raw(), true, b.nbytes());
  } else {
    std::memcpy(dst, a.raw(), a.nbytes());
    std::memcpy(dst + a.nbytes(), b.raw(), b.nbytes());
  }
  return out;
}

}  // namespace

Qwen3VlTextModel::Qwen3VlTextModel(const Qwen3VlTextWeights& w, const Qwen3VlTextConfig& cfg, int64_t n_layers,
                                   const Qwen3VlTextOptions& opt)
    : cfg_(cfg), device_(opt.device), comm_(opt.comm) {
  dtype_ = qwen3vl_tower_dtype(opt.precision, device_, "text");
  if (n_layers < 0) n_layers = cfg.n_layers;
  if (n_layers > cfg.n_layers)
    fail("{}: {} decoder layers requested, the model has {}", w.path(), n_layers, cfg.n_layers);
  const int64_t G = cfg.n_kv_heads;
  if (G < 1 || cfg.n_heads % G != 0) fail("{}: {} query heads do not split over {} KV heads", w.path(), cfg.n_heads, G);
  if (cfg.intermediate < G)
    fail("{}: FFN width {} is smaller than the {} KV heads the units are cut by", w.path(), cfg.intermediate, G);

  // Placement: T = min(ranks, G) ranks hold units; the others hold nothing and receive the outputs.
  const int n = comm_ ? comm_->size() : 1, me = comm_ ? comm_->rank() : 0;
  tp_size_ = static_cast<int>(std::min<int64_t>(n, G));
  if (comm_ && n > tp_size_) {
    tp_comm_ = comm_->split(me < tp_size_ ? 0 : 1, me);
    if (me == 0)
      spdlog::warn(
          "Qwen3-VL text: {} ranks but {} KV heads: ranks {}..{} hold no text weights and receive the "
          "outputs by broadcast",
          n, G, tp_size_, n - 1);
  }
  tp_rank_ = me < tp_size_ ? me : -1;
  for (int r = 0; r < tp_size_; ++r) unit_parts_.push_back(part_of(G, tp_size_, r));
  units_ = tp_rank_ >= 0 ? unit_parts_[static_cast<size_t>(tp_rank_)] : Range{0, 0};

  const std::string p = qwen3vl_text_prefix(w);
  std::vector<std::string> problems;
  // On the GPU every block goes through one staging loader (io/device_loader.h): reads and copies overlapped, the
  // bytes and the rate reported per tower.
  std::unique_ptr<DeviceLoader> loader =
      device_ == Device::cuda ? std::make_unique<DeviceLoader>(device_, "Qwen3-VL text tower") : nullptr;
  // Checks the whole stored shape, then reads rows or columns of it (the rest is never read), in the compute dtype
  // on the model's device (Qwen3VlTextWeights::load: converted where it lands).
  auto load = [&](const std::string& key, const Shape& shape, Slice rows = {}, Slice cols = {}) -> Tensor {
    const std::string full = p + key;
    if (!w.has(full)) {
      problems.push_back("missing " + full);
      return {};
    }
    if (w.info(full).shape != shape) {
      problems.push_back(fmt::format("{} is {}, expected {}", full, shape_str(w.info(full).shape), shape_str(shape)));
      return {};
    }
    if (!problems.empty()) return {};  // the load fails anyway: read nothing more
    return w.load(full, dtype_, device_, rows, cols, loader.get());
  };
  auto count = [&](const Tensor& t, bool sharded) -> Tensor {
    if (t.defined() && t.numel() > 0) (sharded ? bytes_sharded_ : bytes_replicated_) += t.nbytes();
    return t;
  };
  plan_streaming(n_layers, opt, w, p);
  const int64_t h = cfg.hidden, D = cfg.head_dim;
  if (tp_rank_ >= 0) embed_ = count(load("embed_tokens.weight", {cfg.vocab_size, h}), false);
  for (int64_t i = 0; i < n_layers && tp_rank_ >= 0; ++i) {
    const std::string l = "layers." + std::to_string(i) + ".";
    Layer L;
    L.in_norm = count(load(l + "input_layernorm.weight", {h}), false);
    L.q_norm = count(load(l + "self_attn.q_norm.weight", {D}), false);
    L.k_norm = count(load(l + "self_attn.k_norm.weight", {D}), false);
    L.post_norm = count(load(l + "post_attention_layernorm.weight", {h}), false);
    if (streams(i) && park_source_ == ParkSource::mapped) {  // the units stay in the file
      if (problems.empty()) park_units_mapped(i, L, w, p + l);
      layers_.push_back(std::move(L));
      continue;
    }
    for (int64_t g = units_.begin; g < units_.end; ++g) {
      const std::vector<UnitPart> part = unit_parts(g);
      auto unit_load = [&](size_t k) { return load(l + part[k].key, part[k].shape, part[k].rows, part[k].cols); };
      Unit u;
      u.q = count(unit_load(0), true);
      u.k = count(unit_load(1), true);
      u.v = count(unit_load(2), true);
      u.o = count(unit_load(3), true);
      u.down = count(unit_load(6), true);
      const Tensor up = unit_load(4);
      const Tensor gate = unit_load(5);
      // [up; gate] so that one GEMM feeds ops::swiglu's [value; gate] layout.
      if (up.defined() && gate.defined() && up.numel() && gate.numel()) u.up_gate = count(stack_rows(up, gate), true);
      L.units.push_back(std::move(u));
    }
    if (streams(i) && problems.empty()) park_units(i, L);  // the device holds one streamed layer at a time
    layers_.push_back(std::move(L));
  }
  if (tp_rank_ >= 0 && n_layers == cfg.n_layers) final_norm_ = count(load("norm.weight", {h}), false);
  if (!problems.empty()) {
    std::string list;
    for (const auto& s : problems) list += "\n  " + s;
    fail("{}: the Qwen3-VL text decoder ({}) does not load: {} problem(s):{}", w.path(), cfg.summary(), problems.size(),
         list);
  }
  if (loader) load_report_ = loader->finish();
  start_streaming();
  if (tp_rank_ < 0) layers_.resize(static_cast<size_t>(n_layers));  // layer count for checks; no weights
  if (comm_ && n > 1) spdlog::info("{}", describe_shard());
}

// Unit g: query heads [g*qpg, (g+1)*qpg) (q rows, o columns), KV head g (k, v rows), FFN chunk part_of(ff, G, g)
// (up, gate rows, down columns).
std::vector<Qwen3VlTextModel::UnitPart> Qwen3VlTextModel::unit_parts(int64_t g) const {
  const int64_t h = cfg_.hidden, D = cfg_.head_dim, G = cfg_.n_kv_heads, qd = cfg_.n_heads * D, kd = G * D;
  const int64_t ff = cfg_.intermediate, qpg = cfg_.n_heads / G;
  const Range c = part_of(ff, static_cast<int>(G), static_cast<int>(g));
  const Slice heads{g * qpg * D, (g + 1) * qpg * D}, kv{g * D, (g + 1) * D}, chunk{c.begin, c.end};
  return {{"self_attn.q_proj.weight", {qd, h}, heads, {}}, {"self_attn.k_proj.weight", {kd, h}, kv, {}},
          {"self_attn.v_proj.weight", {kd, h}, kv, {}},    {"self_attn.o_proj.weight", {h, qd}, {}, heads},
          {"mlp.up_proj.weight", {ff, h}, chunk, {}},      {"mlp.gate_proj.weight", {ff, h}, chunk, {}},
          {"mlp.down_proj.weight", {h, ff}, {}, chunk}};
}

std::string Qwen3VlTextModel::describe_shard() const {
  const int me = comm_ ? comm_->rank() : 0;
  if (tp_rank_ < 0)
    return fmt::format("Qwen3-VL text: rank {} holds no weights ({} KV heads over {} ranks)", me, cfg_.n_kv_heads,
                       tp_size_);
  const Range c0 = part_of(cfg_.intermediate, static_cast<int>(cfg_.n_kv_heads), static_cast<int>(units_.begin));
  const Range c1 = part_of(cfg_.intermediate, static_cast<int>(cfg_.n_kv_heads), static_cast<int>(units_.end - 1));
  const int64_t qpg = cfg_.n_heads / cfg_.n_kv_heads;
  return fmt::format(
      "Qwen3-VL text: rank {} of {} tensor-parallel: KV heads [{}, {}), query heads [{}, {}), FFN columns "
      "[{}, {}); {} layers, {:.1f} MB replicated + {:.1f} MB sharded on the {}{}",
      tp_rank_, tp_size_, units_.begin, units_.end, units_.begin * qpg, units_.end * qpg, c0.begin, c1.end,
      layers_loaded(), bytes_replicated_ / 1e6, bytes_sharded_ / 1e6, device_ == Device::cpu ? "CPU" : "GPU",
      streamer_ ? fmt::format(" ({} layers, {:.1f} MB of it, streamed)", layers_streamed(), bytes_streamed_ / 1e6)
                : "");
}

Qwen3VlTextOutputs Qwen3VlTextModel::forward(const std::vector<int32_t>& ids, const std::vector<int64_t>& keep,
                                             bool want_normed, const std::vector<int64_t>* mrope_positions,
                                             const TextExtras* extras, const TextLayerHook& before_layer) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t last = 0;
  for (int64_t k : keep) {
    if (k < 0 || k > layers_loaded())
      fail("Qwen3-VL text: hidden_states[{}] requested, {} layers loaded (0..{} available)", k, layers_loaded(),
           layers_loaded());
    last = std::max(last, k);
  }
  if (want_normed) {
    if (layers_loaded() != cfg_.n_layers || (tp_rank_ >= 0 && !final_norm_.numel()))
      fail("Qwen3-VL text: the normed last state needs all {} layers and the final norm loaded ({} loaded)",
           cfg_.n_layers, layers_loaded());
    last = layers_loaded();
  }
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= cfg_.vocab_size)
      fail("Qwen3-VL text: token id {} at position {} is outside the vocabulary [0, {})", ids[i], i, cfg_.vocab_size);
  if (mrope_positions && static_cast<int64_t>(mrope_positions->size()) != 3 * n)
    fail("Qwen3-VL text: {} mRoPE positions for {} tokens (need 3 x N)", mrope_positions->size(), n);
  if (extras) {
    const int64_t r = static_cast<int64_t>(extras->rows.size());
    std::vector<bool> seen(static_cast<size_t>(n), false);
    for (int64_t row : extras->rows) {
      if (row < 0 || row >= n) fail("Qwen3-VL text: extras row {} outside the {} tokens", row, n);
      if (seen[static_cast<size_t>(row)]) fail("Qwen3-VL text: extras row {} given twice", row);
      seen[static_cast<size_t>(row)] = true;
    }
    auto check = [&](const Tensor& t, const std::string& what) {
      if (t.ndim() != 2 || t.dim(0) != r || t.dim(1) != cfg_.hidden)
        fail("Qwen3-VL text: extras {} is {}, expected [{}, {}] (rows x hidden)", what, shape_str(t.shape()), r,
             cfg_.hidden);
    };
    if (extras->embeds.defined() && extras->embeds.numel() > 0) check(extras->embeds, "embeds");
    if (!extras->deepstack.empty() && r == 0) fail("Qwen3-VL text: deepstack features given but no extras rows");
    for (size_t k = 0; k < extras->deepstack.size(); ++k) check(extras->deepstack[k], fmt::format("deepstack[{}]", k));
  }

  Qwen3VlTextOutputs out;
  if (tp_rank_ >= 0) {
    out = compute(ids, keep, want_normed, last, mrope_positions, extras, before_layer);
  } else if (before_layer && n > 0) {  // nothing to compute here: the hook's calls in the same order
    for (int64_t li = 0; li < last; ++li) before_layer(li, last);
  }
  if (comm_ && comm_->size() > tp_size_) {
    // Ranks beyond T take every output from rank 0, in a fixed order (sorted keep, then the normed state).
    std::vector<int64_t> order(keep.begin(), keep.end());
    std::sort(order.begin(), order.end());
    order.erase(std::unique(order.begin(), order.end()), order.end());
    if (want_normed) order.push_back(-1);
    for (int64_t k : order) {
      Tensor t =
          tp_rank_ >= 0 ? (k < 0 ? out.last_normed : out.hidden_states.at(k)).cpu() : Tensor(dtype_, {n, cfg_.hidden});
      comm_->broadcast(t.raw(), static_cast<int64_t>(t.nbytes()), 0,
                       fmt::format("Qwen3-VL text output {}", k < 0 ? "normed" : std::to_string(k)));
      if (tp_rank_ < 0) (k < 0 ? out.last_normed : out.hidden_states[k]) = t.to_device(device_);
    }
  }
  return out;
}

Qwen3VlTextOutputs Qwen3VlTextModel::compute(const std::vector<int32_t>& ids, const std::vector<int64_t>& keep,
                                             bool want_normed, int64_t last,
                                             const std::vector<int64_t>* mrope_positions, const TextExtras* extras,
                                             const TextLayerHook& before_layer) const {
  const int64_t n = static_cast<int64_t>(ids.size());
  auto kept = [&](int64_t k) { return std::find(keep.begin(), keep.end(), k) != keep.end(); };
  auto on_dev = [&](const Tensor& t) {
    Tensor c = t.dtype() == dtype_ ? t : t.to(dtype_);
    return c.device() == device_ ? c : c.to_device(device_);
  };
  // The folded partials (accumulator dtype) rounded once to the compute dtype, as one projection would be.
  auto to_compute = [&](const Tensor& t) { return t.dtype() == dtype_ ? t : t.to(dtype_); };
  Qwen3VlTextOutputs out;
  Tensor x = ops::gather_rows(embed_, Tensor::from(ids, {n}));
  // The vision hook's rows, as an i32 index (host; the device ops copy it over).
  Tensor rows_idx;
  if (extras && !extras->rows.empty()) {
    std::vector<int32_t> r(extras->rows.begin(), extras->rows.end());
    rows_idx = Tensor::from(r, {static_cast<int64_t>(r.size())});
    if (extras->embeds.defined() && extras->embeds.numel() > 0) ops::scatter_rows(x, on_dev(extras->embeds), rows_idx);
  }
  if (kept(0)) out.hidden_states[0] = x.clone();
  if (n == 0) {
    for (int64_t k : keep) out.hidden_states[k] = x;
    if (want_normed) out.last_normed = x;
    return out;
  }
  // bf16: transformers takes cos/sin in f32 and casts them to the model's dtype.
  auto [cos_h, sin_h] = mrope_tables(cfg_, n, mrope_positions, dtype_ == DType::bf16 ? DType::f32 : dtype_);
  const Tensor cos = on_dev(cos_h), sin = on_dev(sin_h);
  std::unique_lock stream_lock(stream_mu_, std::defer_lock);  // a streamed tower's ring serves one forward at a time
  if (streamer_) stream_lock.lock();
  for (int64_t li = 0; li < last; ++li) {
    if (before_layer) before_layer(li, last);
    LayerHold hold(*this, li);  // a streamed layer's weights: in its ring slot once the compute queue gets there
    const Layer& L = hold.layer();
    const std::string name = "layer " + std::to_string(li);
    std::vector<Tensor> parts;
    Tensor h = norm(x, L.in_norm, cfg_.hidden);
    for (const Unit& u : L.units) parts.push_back(attention_partial(u, h, L, cos, sin));
    x = ops::add(x, to_compute(fold_units(parts, name + " attention")));
    parts.clear();
    h = norm(x, L.post_norm, cfg_.hidden);
    for (const Unit& u : L.units) parts.push_back(mlp_partial(u, h));
    hold.release();  // the layer's kernels are queued: its slot takes the next streamed layer
    x = ops::add(x, to_compute(fold_units(parts, name + " MLP")));
    if (kept(li + 1)) out.hidden_states[li + 1] = x;
    if (extras && static_cast<size_t>(li) < extras->deepstack.size() && rows_idx.numel() > 0) {
      // DeepStack: x[rows] += deepstack[li], on a copy (the recorded state above keeps the layer's output).
      Tensor added = ops::add(ops::gather_rows(x, rows_idx), on_dev(extras->deepstack[static_cast<size_t>(li)]));
      x = x.clone();
      ops::scatter_rows(x, added, rows_idx);
    }
  }
  if (want_normed) out.last_normed = norm(x, final_norm_, cfg_.hidden);
  return out;
}

Tensor Qwen3VlTextModel::hidden_state(const std::vector<int32_t>& ids, int64_t k) const {
  return forward(ids, {k}, false).hidden_states.at(k);
}

}  // namespace h3

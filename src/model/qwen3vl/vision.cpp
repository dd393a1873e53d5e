// Qwen3-VL vision encoder on the CPU (see model/qwen3vl/vision.h for the data flow and row order).
#include "model/qwen3vl/vision.h"

#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <type_traits>

#include "core/device.h"
#include "core/json.h"
#include "core/json_limits.h"
#include "model/qwen3vl/weights.h"
#include "ops/ops.h"

namespace h3 {

namespace {

using json = nlohmann::json;

// torch.linspace(0, end, steps) in f32 as ATen's CPU kernel computes it: the first half counts up from the start,
// the second half down from the end, with a step rounded to f32.
std::vector<float> linspace_f32(float end, int64_t steps) {
  std::vector<float> out(static_cast<size_t>(steps));
  if (steps == 1) {
    out[0] = 0.0f;
    return out;
  }
  const float step = end / static_cast<float>(steps - 1);
  const int64_t halfway = steps / 2;
  for (int64_t i = 0; i < steps; ++i)
    out[i] = i < halfway ? step * static_cast<float>(i) : end - step * static_cast<float>(steps - i - 1);
  return out;
}

int64_t total_rows(const std::vector<GridThw>& grids) {
  int64_t n = 0;
  for (const auto& g : grids) n += g[0] * g[1] * g[2];
  return n;
}

// Calls f(row, patch_row, patch_col, grid_index, t) for every patch in the processor's row order.
template <typename F>
void for_each_patch(const std::vector<GridThw>& grids, int64_t m, F f) {
  int64_t row = 0;
  for (size_t gi = 0; gi < grids.size(); ++gi) {
    const auto [t, h, w] = grids[gi];
    for (int64_t ti = 0; ti < t; ++ti)
      for (int64_t bh = 0; bh < h / m; ++bh)
        for (int64_t bw = 0; bw < w / m; ++bw)
          for (int64_t mh = 0; mh < m; ++mh)
            for (int64_t mw = 0; mw < m; ++mw) f(row++, bh * m + mh, bw * m + mw, gi, ti);
  }
}

}  // namespace

Qwen3VlVisionConfig Qwen3VlVisionConfig::from_json_text(const std::string& text, const std::string& where) {
  Qwen3VlVisionConfig c;
  try {
    json j = parse_json_bounded(text, where);
    if (j.contains("vision_config") && j["vision_config"].is_object()) j = j["vision_config"];
    read_if(j, "depth", c.depth);
    read_if(j, "hidden_size", c.hidden);
    read_if(j, "intermediate_size", c.intermediate);
    read_if(j, "num_heads", c.n_heads);
    read_if(j, "in_channels", c.in_channels);
    read_if(j, "patch_size", c.patch);
    read_if(j, "temporal_patch_size", c.temporal_patch);
    read_if(j, "spatial_merge_size", c.merge);
    read_if(j, "out_hidden_size", c.out_hidden);
    read_if(j, "num_position_embeddings", c.n_pos);
    read_if(j, "deepstack_visual_indexes", c.deepstack_indexes);
    if (j.contains("hidden_act") && j["hidden_act"].get<std::string>() != "gelu_pytorch_tanh")
      fail("{}: vision hidden_act '{}' is not supported (Qwen3-VL uses gelu_pytorch_tanh)", where,
           j["hidden_act"].get<std::string>());
  } catch (const json::exception& e) {
    fail("{}: cannot read the Qwen3-VL vision config: {}", where, e.what());
  }
  return c;
}

std::string Qwen3VlVisionConfig::summary() const {
  std::string ds;
  for (int64_t i : deepstack_indexes) {
    if (!ds.empty()) ds += ',';
    ds += std::to_string(i);
  }
  return fmt::format(
      "Qwen3-VL vision: {} blocks, hidden {}, {} heads x {}, ffn {}, patch {}x{}x{} ({} channels), merge {}, "
      "out {}, {} position embeddings, DeepStack after blocks [{}]",
      depth, hidden, n_heads, head_dim(), intermediate, temporal_patch, patch, patch, in_channels, merge, out_hidden,
      n_pos, ds);
}

namespace {

// The config text a source carries: a safetensors file's "config" metadata, a text-encoder source's
// config.json.
std::string config_text_of(const SafeTensors& f) {
  return f.meta("config");
}
std::string config_text_of(const Qwen3VlTextWeights& w) {
  return w.config_json();
}

template <class Src>
std::string vision_prefix_of(const Src& f) {
  const std::string tail = "patch_embed.proj.weight";
  for (const auto& k : f.keys())
    if (k.ends_with(tail)) return k.substr(0, k.size() - tail.size());
  fail("{}: no Qwen3-VL vision tower found (no '*patch_embed.proj.weight')", f.path());
}

template <class Src>
bool has_vision_of(const Src& f) {
  for (const auto& k : f.keys())
    if (k.ends_with("patch_embed.proj.weight")) return true;
  return false;
}

template <class Src>
Qwen3VlVisionConfig detect_vision_config_of(const Src& f) {
  const std::string p = vision_prefix_of(f);
  const std::string cfg_text = config_text_of(f);
  Qwen3VlVisionConfig c =
      cfg_text.empty() ? Qwen3VlVisionConfig{} : Qwen3VlVisionConfig::from_json_text(cfg_text, f.path());
  const Shape& pw = f.info(p + "patch_embed.proj.weight").shape;
  if (pw.size() != 5 || pw[3] != pw[4])
    fail("{}: {}patch_embed.proj.weight is {}, expected [hidden, C, tp, p, p]", f.path(), p, shape_str(pw));
  c.hidden = pw[0];
  c.in_channels = pw[1];
  c.temporal_patch = pw[2];
  c.patch = pw[3];
  c.n_pos = f.info(p + "pos_embed.weight").shape.at(0);
  c.intermediate = f.info(p + "blocks.0.mlp.linear_fc1.weight").shape.at(0);
  c.out_hidden = f.info(p + "merger.linear_fc2.weight").shape.at(0);
  const int64_t merged = f.info(p + "merger.linear_fc1.weight").shape.at(1);
  c.merge = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(merged / c.hidden))));
  if (c.merge * c.merge * c.hidden != merged)
    fail("{}: merger input width {} is not hidden {} times a square", f.path(), merged, c.hidden);
  int64_t depth = 0;
  while (f.has(p + "blocks." + std::to_string(depth) + ".norm1.weight")) ++depth;
  c.depth = depth;
  int64_t n_ds = 0;
  while (f.has(p + "deepstack_merger_list." + std::to_string(n_ds) + ".norm.weight")) ++n_ds;
  if (static_cast<int64_t>(c.deepstack_indexes.size()) != n_ds)
    fail("{}: {} DeepStack mergers in the weights but {} deepstack_visual_indexes in the config", f.path(), n_ds,
         c.deepstack_indexes.size());
  for (int64_t i : c.deepstack_indexes)
    if (i < 0 || i >= depth) fail("{}: DeepStack index {} outside the {} blocks", f.path(), i, depth);
  if (c.n_heads <= 0 || c.hidden % c.n_heads != 0 || c.head_dim() % 4 != 0)
    fail("{}: hidden {} over {} heads does not give a head dim divisible by 4 (2-D rotary)", f.path(), c.hidden,
         c.n_heads);
  const auto g = static_cast<int64_t>(std::sqrt(static_cast<double>(c.n_pos)));
  if (g * g != c.n_pos) fail("{}: {} position embeddings are not a square grid", f.path(), c.n_pos);
  return c;
}

}  // namespace

std::string qwen3vl_vision_prefix(const SafeTensors& f) {
  return vision_prefix_of(f);
}
std::string qwen3vl_vision_prefix(const Qwen3VlTextWeights& w) {
  return vision_prefix_of(w);
}
bool has_qwen3vl_vision(const SafeTensors& f) {
  return has_vision_of(f);
}
bool has_qwen3vl_vision(const Qwen3VlTextWeights& w) {
  return has_vision_of(w);
}
Qwen3VlVisionConfig detect_qwen3vl_vision_config(const SafeTensors& f) {
  return detect_vision_config_of(f);
}
Qwen3VlVisionConfig detect_qwen3vl_vision_config(const Qwen3VlTextWeights& w) {
  return detect_vision_config_of(w);
}

Qwen3VlVisionModel::Qwen3VlVisionModel(const SafeTensors& f, const Qwen3VlVisionConfig& cfg, Precision precision)
    : Qwen3VlVisionModel(Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f)), cfg,
                         Qwen3VlVisionOptions{precision, Device::cpu}) {}

Qwen3VlVisionModel::Qwen3VlVisionModel(const Qwen3VlTextWeights& w, const Qwen3VlVisionConfig& cfg, Precision precision)
    : Qwen3VlVisionModel(w, cfg, Qwen3VlVisionOptions{precision, Device::cpu}) {}

Qwen3VlVisionModel::Qwen3VlVisionModel(const Qwen3VlTextWeights& w, const Qwen3VlVisionConfig& cfg,
                                       const Qwen3VlVisionOptions& opt)
    : cfg_(cfg) {
  load(w, opt);
}

void Qwen3VlVisionModel::load(const Qwen3VlTextWeights& f, const Qwen3VlVisionOptions& opt) {
  const Qwen3VlVisionConfig& cfg = cfg_;
  device_ = opt.device;
  dtype_ = qwen3vl_tower_dtype(opt.precision, device_, "vision");
  const std::string p = vision_prefix_of(f);
  std::vector<std::string> problems;
  auto present = [&](const std::string& full, const Shape& shape) {
    if (!f.has(full)) {
      problems.push_back("missing " + full);
      return false;
    }
    if (f.info(full).shape != shape) {
      problems.push_back(fmt::format("{} is {}, expected {}", full, shape_str(f.info(full).shape), shape_str(shape)));
      return false;
    }
    return problems.empty();  // after a problem the load fails anyway: read nothing more
  };
  auto load = [&](const std::string& key, const Shape& shape) -> Tensor {
    const std::string full = p + key;
    if (!present(full, shape)) return {};
    Tensor t = f.load(full, dtype_, device_);
    bytes_ += t.nbytes();
    return t;
  };
  const int64_t h = cfg.hidden, ff = cfg.intermediate, mh = h * cfg.merge * cfg.merge, out = cfg.out_hidden;
  patch_w_ = load("patch_embed.proj.weight", {h, cfg.in_channels, cfg.temporal_patch, cfg.patch, cfg.patch});
  if (patch_w_.numel()) patch_w_ = patch_w_.reshape({h, cfg.patch_dim()});
  patch_b_ = load("patch_embed.proj.bias", {h});
  // The position table is read on the host only (position_embeddings() interpolates it there); bf16 runs hold its
  // bf16 values in f32.
  if (present(p + "pos_embed.weight", {cfg.n_pos, h}))
    pos_table_ = dtype_ == DType::bf16 ? f.load(p + "pos_embed.weight", DType::bf16, Device::cpu).to(DType::f32)
                                       : f.load(p + "pos_embed.weight", dtype_, Device::cpu);
  for (int64_t i = 0; i < cfg.depth; ++i) {
    const std::string b = "blocks." + std::to_string(i) + ".";
    Block B;
    B.n1_w = load(b + "norm1.weight", {h});
    B.n1_b = load(b + "norm1.bias", {h});
    B.qkv_w = load(b + "attn.qkv.weight", {3 * h, h});
    B.qkv_b = load(b + "attn.qkv.bias", {3 * h});
    B.proj_w = load(b + "attn.proj.weight", {h, h});
    B.proj_b = load(b + "attn.proj.bias", {h});
    B.n2_w = load(b + "norm2.weight", {h});
    B.n2_b = load(b + "norm2.bias", {h});
    B.fc1_w = load(b + "mlp.linear_fc1.weight", {ff, h});
    B.fc1_b = load(b + "mlp.linear_fc1.bias", {ff});
    B.fc2_w = load(b + "mlp.linear_fc2.weight", {h, ff});
    B.fc2_b = load(b + "mlp.linear_fc2.bias", {h});
    blocks_.push_back(std::move(B));
  }
  auto load_merger = [&](const std::string& m, bool post) {
    Merger M;
    M.post_shuffle_norm = post;
    M.norm_w = load(m + "norm.weight", {post ? mh : h});
    M.norm_b = load(m + "norm.bias", {post ? mh : h});
    M.fc1_w = load(m + "linear_fc1.weight", {mh, mh});
    M.fc1_b = load(m + "linear_fc1.bias", {mh});
    M.fc2_w = load(m + "linear_fc2.weight", {out, mh});
    M.fc2_b = load(m + "linear_fc2.bias", {out});
    return M;
  };
  merger_ = load_merger("merger.", false);
  for (size_t k = 0; k < cfg.deepstack_indexes.size(); ++k)
    deepstack_.push_back(load_merger("deepstack_merger_list." + std::to_string(k) + ".", true));
  if (!problems.empty()) {
    std::string list;
    for (const auto& s : problems) list += "\n  " + s;
    fail("{}: the Qwen3-VL vision tower ({}) does not load: {} problem(s):{}", f.path(), cfg.summary(), problems.size(),
         list);
  }
}

Tensor Qwen3VlVisionModel::position_embeddings(const std::vector<GridThw>& grids) const {
  const int64_t g = static_cast<int64_t>(std::sqrt(static_cast<double>(cfg_.n_pos)));
  const int64_t h = cfg_.hidden;
  const bool bf = dtype_ == DType::bf16;  // computed in f32 with every product and sum rounded to bf16
  Tensor out(bf ? DType::f32 : dtype_, {total_rows(grids), h});
  auto run = [&]<typename T>(T) {
    const T* table = pos_table_.data<T>();
    T* o = out.data<T>();
    auto r = [&](T v) -> T {
      if constexpr (std::is_same_v<T, float>) return bf ? round_bf16(v) : v;
      return v;
    };
    // Per grid: the 4 corner indices and f32 bilinear weights of each (row, col), then rows in patch order.
    std::vector<std::array<int64_t, 4>> idx;
    std::vector<std::array<T, 4>> wts;
    size_t cached = SIZE_MAX;
    for_each_patch(grids, cfg_.merge, [&](int64_t row, int64_t pr, int64_t pc, size_t gi, int64_t) {
      const int64_t gh = grids[gi][1], gw = grids[gi][2];
      if (cached != gi) {
        const std::vector<float> hs = linspace_f32(static_cast<float>(g - 1), gh);
        const std::vector<float> ws = linspace_f32(static_cast<float>(g - 1), gw);
        idx.assign(static_cast<size_t>(gh * gw), {});
        wts.assign(static_cast<size_t>(gh * gw), {});
        for (int64_t y = 0; y < gh; ++y)
          for (int64_t c = 0; c < gw; ++c) {
            const auto r0 = static_cast<int64_t>(hs[y]), c0 = static_cast<int64_t>(ws[c]);
            const int64_t r1 = std::min(r0 + 1, g - 1), c1 = std::min(c0 + 1, g - 1);
            const float dh = hs[y] - static_cast<float>(r0), dw = ws[c] - static_cast<float>(c0);
            idx[y * gw + c] = {r0 * g + c0, r0 * g + c1, r1 * g + c0, r1 * g + c1};
            wts[y * gw + c] = {r(static_cast<T>((1.0f - dh) * (1.0f - dw))), r(static_cast<T>((1.0f - dh) * dw)),
                               r(static_cast<T>(dh * (1.0f - dw))), r(static_cast<T>(dh * dw))};
          }
        cached = gi;
      }
      const auto& id = idx[pr * gw + pc];
      const auto& wt = wts[pr * gw + pc];
      for (int64_t j = 0; j < h; ++j) {
        T acc = r(table[id[0] * h + j] * wt[0]);
        acc = r(acc + r(table[id[1] * h + j] * wt[1]));
        acc = r(acc + r(table[id[2] * h + j] * wt[2]));
        acc = r(acc + r(table[id[3] * h + j] * wt[3]));
        o[row * h + j] = acc;
      }
    });
  };
  if (dtype_ == DType::f64)
    run(double{});
  else
    run(float{});
  return bf ? out.to(DType::bf16) : out;
}

std::pair<Tensor, Tensor> Qwen3VlVisionModel::rotary_tables(const std::vector<GridThw>& grids) const {
  const int64_t d = cfg_.head_dim(), quarter = d / 4, half = d / 2;
  // inv_freq over a rotary dim of head_dim/2: 1 / theta^(2j / (head_dim/2)), j < head_dim/4, in f32.
  std::vector<float> inv_freq(static_cast<size_t>(quarter));
  for (int64_t j = 0; j < quarter; ++j)
    inv_freq[j] =
        1.0f / std::pow(static_cast<float>(cfg_.rope_theta), static_cast<float>(2 * j) / static_cast<float>(half));
  const int64_t n = total_rows(grids);
  const DType td = dtype_ == DType::f64 ? DType::f64 : DType::f32;  // bf16 runs rotate in f32
  Tensor cos_t(td, {n, d}), sin_t(td, {n, d});
  auto run = [&]<typename T>(T) {
    T* cp = cos_t.data<T>();
    T* sp = sin_t.data<T>();
    for_each_patch(grids, cfg_.merge, [&](int64_t row, int64_t pr, int64_t pc, size_t, int64_t) {
      for (int64_t j = 0; j < half; ++j) {
        const T pos = static_cast<T>(j < quarter ? pr : pc);
        const T angle = pos * static_cast<T>(inv_freq[j % quarter]);
        cp[row * d + j] = cp[row * d + j + half] = std::cos(angle);
        sp[row * d + j] = sp[row * d + j + half] = std::sin(angle);
      }
    });
  };
  if (td == DType::f32)
    run(float{});
  else
    run(double{});
  return {cos_t, sin_t};
}

Tensor Qwen3VlVisionModel::merge(const Merger& m, const Tensor& x) const {
  const int64_t mm = cfg_.merge * cfg_.merge, wide = cfg_.hidden * mm;
  Tensor rows = m.post_shuffle_norm
                    ? ops::layer_norm(x.reshape({x.dim(0) / mm, wide}), &m.norm_w, &m.norm_b, cfg_.ln_eps)
                    : ops::layer_norm(x, &m.norm_w, &m.norm_b, cfg_.ln_eps).reshape({x.dim(0) / mm, wide});
  Tensor hidden = ops::gelu_erf(ops::linear(rows, m.fc1_w, &m.fc1_b));
  return ops::linear(hidden, m.fc2_w, &m.fc2_b);
}

namespace {

// The tensor in dtype dt on device (copies only what differs).
Tensor to_place(const Tensor& t, DType dt, Device device) {
  if (t.device() == device) return t.dtype() == dt ? t : t.to(dt);
  if (device == Device::cpu) return t.cpu().to(dt);
  // To the GPU: narrow on the host first (f64 pixel rows go over as f32, as the reference's processor gives them).
  const Tensor h = t.dtype() == DType::f64 && dt != DType::f64 ? t.to(DType::f32) : t;
  const Tensor d = h.to_device(device);
  return d.dtype() == dt ? d : d.to(dt);
}

// dst rows [at, at + src rows) = src, on their device.
void put_rows(Tensor& dst, int64_t at, const Tensor& src) {
  auto* p = static_cast<std::byte*>(dst.raw()) + at * dst.dim(1) * static_cast<int64_t>(dtype_size(dst.dtype()));
  if (dst.on_device())
    device_hooks().copy(p, true, src.raw(), src.on_device(), src.nbytes());
  else
    std::memcpy(p, src.raw(), src.nbytes());
}

}  // namespace

Qwen3VlVisionOutputs Qwen3VlVisionModel::forward(const Tensor& pixels, const std::vector<GridThw>& grids,
                                                 bool keep_blocks) const {
  const int64_t n = total_rows(grids), m = cfg_.merge, hd = cfg_.head_dim(), h = cfg_.hidden;
  for (const auto& g : grids)
    if (g[0] < 1 || g[1] < m || g[2] < m || g[1] % m || g[2] % m)
      fail("Qwen3-VL vision: grid ({}, {}, {}) is not a positive multiple of the merge size {} in h and w", g[0], g[1],
           g[2], m);
  if (pixels.ndim() != 2 || pixels.dim(0) != n || pixels.dim(1) != cfg_.patch_dim())
    fail("Qwen3-VL vision: pixel rows are {}, the grids need [{}, {}]", pixels.describe(), n, cfg_.patch_dim());
  Qwen3VlVisionOutputs out;
  if (n == 0) return out;

  const bool bf = dtype_ == DType::bf16;
  const Tensor px = to_place(pixels, dtype_, device_);
  Tensor x = ops::add(ops::linear(px, patch_w_, &patch_b_), to_place(position_embeddings(grids), dtype_, device_));
  const auto [cos_h, sin_h] = rotary_tables(grids);
  const Tensor cos = to_place(cos_h, cos_h.dtype(), device_), sin = to_place(sin_h, sin_h.dtype(), device_);
  // q/k rotated in the tables' dtype: bf16 runs rotate in f32 and round once, as transformers does.
  auto rotate = [&](const Tensor& t) {
    if (!bf) return ops::rope(t, cos, sin, hd, false);
    return ops::rope(t.to(DType::f32), cos, sin, hd, false).to(DType::bf16);
  };
  // Attention sequences: one per temporal group of each grid (rows are contiguous per group).
  std::vector<std::pair<int64_t, int64_t>> seqs;
  for (int64_t row = 0; const auto& g : grids)
    for (int64_t t = 0; t < g[0]; ++t, row += g[1] * g[2]) seqs.emplace_back(row, row + g[1] * g[2]);

  for (int64_t bi = 0; bi < cfg_.depth; ++bi) {
    const Block& B = blocks_[bi];
    const Tensor normed = ops::layer_norm(x, &B.n1_w, &B.n1_b, cfg_.ln_eps);
    const Tensor qkv = ops::linear(normed, B.qkv_w, &B.qkv_b);
    const Tensor q = rotate(ops::columns(qkv, 0, h));
    const Tensor k = rotate(ops::columns(qkv, h, 2 * h));
    const Tensor v = ops::columns(qkv, 2 * h, 3 * h);
    Tensor attn;
    if (seqs.size() == 1) {
      attn = ops::attention(q, k, v, hd);
    } else {
      attn = Tensor::empty(dtype_, {n, h}, device_);
      for (const auto& [b, e] : seqs) put_rows(attn, b, ops::attention(q.rows(b, e), k.rows(b, e), v.rows(b, e), hd));
    }
    x = ops::add(x, ops::linear(attn, B.proj_w, &B.proj_b));
    const Tensor normed2 = ops::layer_norm(x, &B.n2_w, &B.n2_b, cfg_.ln_eps);
    x = ops::add(x, ops::linear(ops::gelu_tanh(ops::linear(normed2, B.fc1_w, &B.fc1_b)), B.fc2_w, &B.fc2_b));
    if (keep_blocks) out.block_out.push_back(x);
    for (size_t k2 = 0; k2 < cfg_.deepstack_indexes.size(); ++k2)
      if (cfg_.deepstack_indexes[k2] == bi) {
        if (out.deepstack.size() < cfg_.deepstack_indexes.size()) out.deepstack.resize(cfg_.deepstack_indexes.size());
        out.deepstack[k2] = merge(deepstack_[k2], x);
      }
  }
  out.embeds = merge(merger_, x);
  return out;
}

}  // namespace h3

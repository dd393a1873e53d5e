#include "model/dit/checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/files.h"
#include "core/finite.h"
#include "core/json_limits.h"
#include "core/names.h"
#include "io/procedural.h"

namespace h3 {

namespace fs = std::filesystem;

std::string_view layout_name(DitLayout l) {
  static constexpr std::array<Named<DitLayout>, 5> names{
      {{DitLayout::diffusers, "diffusers"},
       {DitLayout::official, "official (released)"},
       {DitLayout::comfy, "comfy"},
       {DitLayout::golden, "golden (diffusers names, weight. prefix)"},
       {DitLayout::procedural, "procedural"}}};
  return name_in(names, l);
}

namespace {

std::string read_text(const fs::path& p) {
  return read_text_file_checked(p.string(), "config");
}

bool starts_with(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}

// Released/ComfyUI name -> diffusers name. Returns "" for names with no diffusers counterpart.
std::string official_to_diffusers(const std::string& k) {
  static const std::vector<std::pair<std::string, std::string>> top = {
      {"video_patch_proj.", "proj_in."},
      {"audio_patch_proj.", "audio_proj_in."},
      {"condition_proj.", "context_embedder."},
      {"time_embedder.proj_in.", "time_embedder.linear_1."},
      {"time_embedder.proj_out.", "time_embedder.linear_2."},
      {"final_layer.norm.", "norm_out.norm."},
      {"final_layer.adaln_proj.linear.", "norm_out.linear."},
      {"final_layer.video_out.", "proj_out."},
      {"final_layer.audio_out.", "audio_proj_out."},
      {"token_refiner.final_norm.", "token_refiner.final_norm."},
  };
  for (const auto& [from, to] : top)
    if (starts_with(k, from)) return to + k.substr(from.size());
  // "blocks.N.REST" / "token_refiner.blocks.N.REST", read by hand: tensor names are as long as a file makes them, and
  // a regular expression over one recursed off the stack (a 40,000-character name).
  const bool refiner = starts_with(k, "token_refiner.blocks.");
  if (!refiner && !starts_with(k, "blocks.")) return "";
  const size_t digits = refiner ? 21 : 7;
  size_t dot = digits;
  while (dot < k.size() && k[dot] >= '0' && k[dot] <= '9') ++dot;
  if (dot == digits || dot >= k.size() || k[dot] != '.' || dot + 1 == k.size()) return "";
  const std::string rest = k.substr(dot + 1);
  std::string prefix = refiner ? "token_refiner.refiner_blocks." : "transformer_blocks.";
  prefix += k.substr(digits, dot - digits) + ".";
  static const std::vector<std::pair<std::string, std::string>> inner = {
      {"norm1.weight", "norm1.weight"},
      {"norm2.weight", "norm2.weight"},
      {"attn.q_norm.weight", "attn.norm_q.weight"},
      {"attn.k_norm.weight", "attn.norm_k.weight"},
      {"attn.out_proj.weight", "attn.to_out.0.weight"},
      {"attn.qkv_proj.weight", "attn.qkv_proj.weight"},  // split later
      {"mlp.fc1.weight", "ff.net.0.proj.weight"},
      {"mlp.fc2.weight", "ff.net.2.weight"},
      {"adaln_proj.linear.weight", "adaln_proj.linear.weight"},
      {"adaln_proj.linear.bias", "adaln_proj.linear.bias"},
  };
  for (const auto& [from, to] : inner)
    if (rest == from) return prefix + to;
  return "";
}

bool is_quant_key(const std::string& k) {
  for (const char* s : {".weight_scale", ".input_scale", ".comfy_quant", ".scale_weight", ".scale_input"})
    if (k.size() >= std::strlen(s) && k.find(s) != std::string::npos) return true;
  return k == "scaled_fp8";
}

// The quantized weights of one file: ComfyUI comfy_quant descriptions, legacy scale_weight, or a bare weight_scale
// next to an F8_E4M3 / I8 weight. Throws naming the file and key for formats this engine cannot dequantize.
std::map<std::string, QuantSpec> collect_quant(const SafeTensors& st) {
  std::map<std::string, QuantSpec> out;
  auto need = [&](const std::string& key, const std::string& why) {
    if (!st.has(key)) fail("{}: '{}' needs '{}', which is missing", st.path(), why, key);
  };
  for (const auto& k : st.keys()) {
    std::string layer;
    QuantSpec q;
    if (k.ends_with(".comfy_quant")) {
      layer = k.substr(0, k.size() - std::strlen(".comfy_quant"));
      Tensor b = st.get(k);
      if (b.dtype() != DType::u8 && b.dtype() != DType::i8)
        fail("{}: '{}' is {}, expected U8 bytes of JSON", st.path(), k, b.describe());
      std::string text(static_cast<const char*>(b.raw()), static_cast<size_t>(b.numel()));
      const nlohmann::json j = parse_json_bounded(text, st.path() + ": '" + k + "'", 4);
      H3_CHECK(j.is_object() && j.contains("format") && j["format"].is_string(),
               "{}: '{}' must be a JSON object with a string \"format\"; got {}", st.path(), k, text.substr(0, 200));
      const std::string format = j["format"].get<std::string>();
      if (format == "float8_e4m3fn") {
        q.kind = QuantSpec::fp8;
      } else if (format == "int8_tensorwise") {
        q.kind = QuantSpec::int8;
        H3_CHECK(!j.contains("convrot") || j["convrot"].is_boolean(), "{}: '{}': \"convrot\" must be true or false",
                 st.path(), k);
        if (j.value("convrot", false)) {
          const nlohmann::json g = j.contains("convrot_groupsize") ? j["convrot_groupsize"] : nlohmann::json(256);
          // A group that is no power of two in 2 .. 65536 rotates nothing sensible (and 0 would silently skip
          // the rotation the weights were stored with).
          H3_CHECK(g.is_number_integer() && g.get<int64_t>() >= 2 && g.get<int64_t>() <= 65536 &&
                       (g.get<int64_t>() & (g.get<int64_t>() - 1)) == 0,
                   "{}: '{}': convrot_groupsize {} must be a power of two in 2 .. 65536", st.path(), k,
                   g.dump().substr(0, 40));
          q.convrot_group = static_cast<int>(g.get<int64_t>());
        }
      } else if (format == "mxfp8") {
        q.kind = QuantSpec::mxfp8;
      } else if (format == "nvfp4") {
        q.kind = QuantSpec::nvfp4;
        q.scale2_key = layer + ".weight_scale_2";
        need(q.scale2_key, k);
      } else {
        fail(
            "{}: '{}' has format '{}', which this engine cannot dequantize (supported: float8_e4m3fn, "
            "int8_tensorwise with or without convrot, nvfp4, mxfp8); convert the checkpoint to bf16",
            st.path(), k, format);
      }
      q.scale_key = layer + ".weight_scale";
    } else if (k.ends_with(".scale_weight")) {  // legacy scaled_fp8
      layer = k.substr(0, k.size() - std::strlen(".scale_weight"));
      q.kind = QuantSpec::fp8;
      q.scale_key = k;
    } else if (k.ends_with(".weight_scale") && !st.has(k.substr(0, k.size() - 13) + ".comfy_quant")) {
      layer = k.substr(0, k.size() - std::strlen(".weight_scale"));
      need(layer + ".weight", k);
      const DType dt = st.info(layer + ".weight").dtype;
      if (dt != DType::fp8_e4m3 && dt != DType::i8)
        fail("{}: '{}' scales '{}.weight' of dtype {}, expected F8_E4M3 or I8", st.path(), k, layer, dtype_name(dt));
      q.kind = dt == DType::fp8_e4m3 ? QuantSpec::fp8 : QuantSpec::int8;
      q.scale_key = k;
    } else {
      continue;
    }
    need(layer + ".weight", k);
    need(q.scale_key, k);
    out[layer + ".weight"] = q;
  }
  return out;
}

// Infers the config from parameter shapes (used when no config.json or "config" metadata exists).
DitConfig infer_config(const std::map<std::string, Shape>& shapes, const std::string& where) {
  auto need = [&](const std::string& k, size_t ndim) -> const Shape& {
    auto it = shapes.find(k);
    if (it == shapes.end()) fail("{}: cannot infer the config: parameter '{}' is missing", where, k);
    if (it->second.size() != ndim)
      fail("{}: cannot infer the config: '{}' has shape {}, expected {} dimensions", where, k, shape_str(it->second),
           ndim);
    for (auto d : it->second)
      if (d <= 0 || d > (int64_t{1} << 24))
        fail("{}: cannot infer the config: '{}' has shape {}", where, k, shape_str(it->second));
    return it->second;
  };
  DitConfig c;
  c.hidden_size = static_cast<int>(need("proj_in.weight", 2)[0]);
  c.in_channels = static_cast<int>(need("proj_in.weight", 2)[1] / 4);
  c.audio_in_channels = static_cast<int>(need("audio_proj_in.weight", 2)[1]);
  c.text_dim = static_cast<int>(need("context_embedder.weight", 2)[1]);
  c.time_embed_hidden_dim = static_cast<int>(need("time_embedder.linear_1.weight", 2)[0]);
  c.freq_dim = static_cast<int>(need("time_embedder.linear_1.weight", 2)[1]);
  c.time_embed_dim = static_cast<int>(need("time_embedder.linear_2.weight", 2)[0]);
  c.attention_head_dim = static_cast<int>(need("transformer_blocks.0.attn.norm_q.weight", 1)[0]);
  c.num_attention_heads =
      static_cast<int>(need("transformer_blocks.0.attn.to_out.0.weight", 2)[1] / c.attention_head_dim);
  c.ffn_dim = static_cast<int>(need("transformer_blocks.0.ff.net.2.weight", 2)[1]);
  int layers = 0, refiners = 0;
  while (shapes.count("transformer_blocks." + std::to_string(layers) + ".norm1.weight")) ++layers;
  while (shapes.count("token_refiner.refiner_blocks." + std::to_string(refiners) + ".norm1.weight")) ++refiners;
  c.num_layers = layers;
  c.num_refiner_layers = refiners;
  if (c.inner_dim() % c.attention_head_dim != 0 || c.num_attention_heads <= 0)
    fail("{}: cannot infer the config: attention width is not a multiple of head_dim {}", where, c.attention_head_dim);
  // rope_freq_dim is not visible in shapes: the released 16 when it fits the heads, else the most that fits.
  c.rope_freq_dim = std::min(16, c.attention_head_dim / 6);
  if (c.rope_freq_dim < 1)
    fail("{}: cannot infer the config: head_dim {} is too small for RoPE", where, c.attention_head_dim);
  c.validate(where);
  return c;  // rope_freq_dim cannot be seen in shapes: the released value (16) stays
}

// The files of a checkpoint path: a single .safetensors, or a folder (diffusers or released, with its
// transformer/ subfolder) with an index or shards; and the folder's config.json when it has one.
struct CheckpointFiles {
  std::vector<fs::path> files;
  std::string config_text, config_where;
};

CheckpointFiles find_files(const std::string& path) {
  CheckpointFiles found;
  std::vector<fs::path>& files = found.files;
  fs::path p(path);
  if (fs::is_directory(p)) {
    if (!fs::exists(p / "config.json") && fs::is_directory(p / "transformer")) p /= "transformer";
    if (fs::exists(p / "config.json")) {
      found.config_text = read_text(p / "config.json");
      found.config_where = (p / "config.json").string();
    }
    fs::path index;
    for (const char* n : {"diffusion_pytorch_model.safetensors.index.json", "model.safetensors.index.json"})
      if (fs::exists(p / n)) index = p / n;
    if (!index.empty()) {
      nlohmann::json j;
      try {
        j = parse_json_bounded(read_text(index), index.string());
      } catch (const std::exception& e) {
        fail("{}: index is not valid JSON: {}", index.string(), e.what());
      }
      if (!j.contains("weight_map") || !j["weight_map"].is_object())
        fail("{}: index has no 'weight_map' object", index.string());
      std::set<std::string> shard_names;
      for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
        if (!it.value().is_string()) fail("{}: weight_map entry '{}' is not a file name", index.string(), it.key());
        std::string f = it.value().get<std::string>();
        if (f.find('/') != std::string::npos || f.find("..") != std::string::npos)
          fail("{}: weight_map entry '{}' names '{}', which is not a file of this folder", index.string(), it.key(), f);
        shard_names.insert(f);
      }
      for (const auto& s : shard_names) {
        if (!fs::exists(p / s)) fail("{}: shard '{}' listed in the index is missing", index.string(), s);
        files.push_back(p / s);
      }
    } else {
      for (const auto& e : fs::directory_iterator(p))
        if (e.path().extension() == ".safetensors") files.push_back(e.path());
      std::sort(files.begin(), files.end());
    }
    if (files.empty()) fail("{}: folder holds no .safetensors files (expected a DiT checkpoint folder)", path);
  } else if (fs::exists(p)) {
    files.push_back(p);
  } else {
    fail("{}: no such file or folder (give a .safetensors file, a checkpoint folder, or procedural:mini)", path);
  }
  return found;
}

}  // namespace

std::string dit_official_to_diffusers(const std::string& key) {
  return official_to_diffusers(key);
}

DitCheckpoint DitCheckpoint::open(const std::string& path, const DitCheckpointOptions& opt) {
  if (starts_with(path, "procedural:")) return open_procedural(path);
  DitCheckpoint ck;
  ck.path_ = path;
  const CheckpointFiles found = find_files(path);
  for (const auto& f : found.files) {
    ck.files_.push_back(std::make_shared<SafeTensors>(SafeTensors::open(f.string())));
    ck.file_names_.push_back(f.string());
  }
  // Quantized weights (io/quant.h): per file, stored weight key -> how to dequantize it.
  std::vector<std::map<std::string, QuantSpec>> quant(ck.files_.size());
  for (size_t fi = 0; fi < ck.files_.size(); ++fi) quant[fi] = collect_quant(*ck.files_[fi]);
  std::map<std::string, std::string> meta;
  for (const auto& st : ck.files_)
    for (const auto& [k, v] : st->metadata()) meta.emplace(k, v);
  const std::string strip = ck.detect_layout(opt, meta, found.files.size() > 1 || fs::is_directory(path));
  std::vector<std::string> unexpected;
  const std::map<std::string, Shape> shapes = ck.map_keys(strip, quant, unexpected);
  ck.read_config(found.config_text, found.config_where, meta, shapes);
  ck.check_parameters(shapes, std::move(unexpected));
  return ck;
}

// "procedural:NAME[:seed=N]".
DitCheckpoint DitCheckpoint::open_procedural(const std::string& path) {
  std::string spec = path.substr(11);
  uint64_t seed = kDefaultProceduralSeed;
  if (auto p = spec.find(":seed="); p != std::string::npos) {
    std::string s = spec.substr(p + 6);
    spec = spec.substr(0, p);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), seed);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || s[0] == '+' || s[0] == '-')
      fail("{}: seed '{}' is not a non-negative integer below 2^64", path, s);
  }
  auto cfg = DitConfig::named(spec);
  if (!cfg) fail("{}: unknown procedural config '{}' (known: mini, fullwidth-1block, full)", path, spec);
  DitCheckpoint named = procedural(*cfg, seed, path);
  named.config_source_ = "named config '" + spec + "'";
  return named;
}

// Which naming the keys of every file use (one scheme for the whole checkpoint), and for released names the qkv
// row order. Sets layout_, qkv_order_ and detection_reason_; returns the key prefix to strip.
std::string DitCheckpoint::detect_layout(const DitCheckpointOptions& opt,
                                         const std::map<std::string, std::string>& meta, bool sharded) {
  const std::string& path = path_;
  bool any_diffusers = false, any_official = false, any_golden = false, any_comfy_prefix = false;
  for (const auto& st : files_) {
    for (const auto& k : st->keys()) {
      if (starts_with(k, "weight."))
        any_golden = true;
      else if (starts_with(k, "model.diffusion_model."))
        any_comfy_prefix = true;
      else if (starts_with(k, "transformer_blocks.") || starts_with(k, "proj_in."))
        any_diffusers = true;
      else if (starts_with(k, "blocks.") || starts_with(k, "video_patch_proj."))
        any_official = true;
    }
  }
  int kinds = int(any_golden) + int(any_diffusers) + int(any_official || any_comfy_prefix);
  if (kinds == 0) fail("{}: no DiT parameters found (neither diffusers, released nor ComfyUI key names)", path);
  if (kinds > 1) fail("{}: mixes key naming schemes (diffusers / released / golden); give one checkpoint", path);

  if (any_golden) {
    layout_ = DitLayout::golden;
    detection_reason_ = "keys carry the golden 'weight.' prefix and diffusers names";
    return "weight.";
  }
  if (any_diffusers) {
    layout_ = DitLayout::diffusers;
    detection_reason_ = "diffusers key names (transformer_blocks.N.attn.to_q ...)";
    return "";
  }
  // qkv row order cannot be seen in shapes or statistics; decide from how the file was produced.
  QkvOrder order = opt.qkv_order;
  std::string why = order == QkvOrder::unknown ? "" : "given by --qkv-layout";
  auto meta_says = [&](const char* word) {
    for (const auto& [k, v] : meta)
      if (v.find(word) != std::string::npos && v.find("qkv") != std::string::npos) return true;
    return false;
  };
  if (order == QkvOrder::unknown) {
    if (any_comfy_prefix) {
      order = QkvOrder::blocked;
      why = "ComfyUI 'model.diffusion_model.' prefix (ComfyUI repacks store qkv blocked)";
    } else if (meta_says("interleaved") && !meta_says("blocked")) {
      order = QkvOrder::interleaved;
      why = "metadata describes qkv_proj as per-head interleaved";
    } else if (meta_says("blocked") && !meta_says("interleaved")) {
      order = QkvOrder::blocked;
      why = "metadata describes qkv_proj as blocked";
    } else if (meta.count("repo_id") && meta.count("partition")) {
      order = QkvOrder::interleaved;
      why = "metadata repo_id/partition (a repack of the released files, interleaved)";
    } else if (sharded) {
      order = QkvOrder::interleaved;
      why = "a sharded folder in the released layout (released files are interleaved)";
    } else if (meta.count("config") && meta.size() == 1) {
      order = QkvOrder::blocked;
      why = "single file whose only metadata is 'config' (the Comfy-Org repack, blocked)";
    } else {
      fail(
          "{}: released/ComfyUI key names, but the qkv_proj row order (per-head interleaved or blocked) cannot "
          "be told from this file; pass --qkv-layout interleaved|blocked",
          path);
    }
  }
  layout_ = order == QkvOrder::blocked ? DitLayout::comfy : DitLayout::official;
  qkv_order_ = order;
  detection_reason_ = "released key names; qkv " +
                      std::string(order == QkvOrder::blocked ? "blocked" : "per-head interleaved") + ": " + why;
  return any_comfy_prefix ? "model.diffusion_model." : "";
}

// Maps every stored key (less `strip`) to a diffusers name in sources_, splitting fused qkv projections. Returns
// the logical shape of every mapped parameter; keys with no diffusers name go to `unexpected`.
std::map<std::string, Shape> DitCheckpoint::map_keys(const std::string& strip,
                                                     const std::vector<std::map<std::string, QuantSpec>>& quant,
                                                     std::vector<std::string>& unexpected) {
  const std::string& path = path_;
  std::map<std::string, Shape> shapes;
  std::map<std::string, Source> qkv_fused;
  for (size_t fi = 0; fi < files_.size(); ++fi) {
    const auto& st = *files_[fi];
    for (const auto& k : st.keys()) {
      if (layout_ == DitLayout::golden && !starts_with(k, "weight."))
        continue;                                                  // inputs and outputs of the golden case
      if (is_quant_key(k) || k.ends_with("scaled_fp8")) continue;  // scales ride with their weight (quant[fi])
      if (!strip.empty() && !starts_with(k, strip)) {
        unexpected.push_back(k);
        continue;
      }
      std::string name = k.substr(strip.size());
      Source src{static_cast<int>(fi), k};
      if (auto q = quant[fi].find(k); q != quant[fi].end()) src.quant = q->second;
      if (layout_ == DitLayout::official || layout_ == DitLayout::comfy) {
        if (name == "rope.inv_freq") continue;  // recomputed from the config
        std::string d = official_to_diffusers(name);
        if (d.empty()) {
          unexpected.push_back(k);
          continue;
        }
        if (d.ends_with("attn.qkv_proj.weight")) {
          const std::string prefix = d.substr(0, d.size() - std::strlen("qkv_proj.weight"));
          if (qkv_fused.count(prefix)) fail("{}: parameter '{}' appears twice", path, k);
          qkv_fused[prefix] = src;
          shapes[d] = quant_logical_shape(src.quant, st.info(k).shape);
          continue;
        }
        if (d.ends_with("ff.net.0.proj.weight")) src.kind = Source::swap_halves;
        name = d;
      }
      if (sources_.count(name)) fail("{}: parameter '{}' appears twice", path, name);
      sources_[name] = src;
      shapes[name] = quant_logical_shape(src.quant, st.info(k).shape);
    }
  }
  for (const auto& [prefix, src] : qkv_fused) {
    const char* parts[3] = {"to_q.weight", "to_k.weight", "to_v.weight"};
    const Shape& s = shapes[prefix + "qkv_proj.weight"];
    if (s.size() != 2 || s[0] % 3 != 0)
      fail("{}: '{}' has shape {}, expected [3 * inner, hidden]", path, src.key, shape_str(s));
    for (int i = 0; i < 3; ++i) {
      Source part = src;
      part.kind = Source::qkv_part;
      part.part = i;
      sources_[prefix + parts[i]] = part;
      shapes[prefix + parts[i]] = {s[0] / 3, s[1]};
    }
    shapes.erase(prefix + "qkv_proj.weight");
  }
  return shapes;
}

// The config: config.json, then "config" metadata, then inferred from shapes.
void DitCheckpoint::read_config(const std::string& config_text, const std::string& config_where,
                                const std::map<std::string, std::string>& meta,
                                const std::map<std::string, Shape>& shapes) {
  if (!config_text.empty()) {
    config_ = DitConfig::from_json_text(config_text, config_where);
    config_source_ = config_where;
  } else if (meta.count("config")) {
    config_ = DitConfig::from_json_text(meta.at("config"), path_ + " (metadata 'config')");
    config_source_ = "file metadata 'config'";
  } else {
    config_ = infer_config(shapes, path_);
    config_source_ = "inferred from parameter shapes (rope_freq_dim assumed: min(16, head_dim / 6))";
  }
}

// Every expected parameter present with its shape, nothing else; throws listing what is missing, unexpected or
// mis-shaped.
void DitCheckpoint::check_parameters(const std::map<std::string, Shape>& shapes,
                                     std::vector<std::string> unexpected) const {
  std::vector<std::string> missing, misshaped;
  std::set<std::string> expected;
  for (const auto& [k, s] : config_.parameters()) {
    expected.insert(k);
    auto it = shapes.find(k);
    if (it == shapes.end())
      missing.push_back(k);
    else if (it->second != s)
      misshaped.push_back(fmt::format("{} {} (expected {})", k, shape_str(it->second), shape_str(s)));
  }
  for (const auto& [k, s] : shapes)
    if (!expected.count(k)) unexpected.push_back(k);
  auto list = [](const std::vector<std::string>& v) {
    std::string out;
    for (size_t i = 0; i < v.size() && i < 8; ++i) out += (i ? ", " : "") + v[i];
    if (v.size() > 8) out += fmt::format(", ... ({} in all)", v.size());
    return out;
  };
  std::string problems;
  if (!missing.empty()) problems += "\n  missing: " + list(missing);
  if (!unexpected.empty()) problems += "\n  unexpected: " + list(unexpected);
  if (!misshaped.empty()) problems += "\n  wrong shape: " + list(misshaped);
  if (!problems.empty())
    fail("{}: does not match the DiT config from {} ({} layers, {} heads x {}, hidden {}):{}", path_, config_source_,
         config_.num_layers, config_.num_attention_heads, config_.attention_head_dim, config_.hidden_size, problems);
}

DitCheckpoint DitCheckpoint::procedural(const DitConfig& config, uint64_t seed, const std::string& label) {
  config.validate(label);
  DitCheckpoint ck;
  ck.path_ = label;
  ck.seed_ = seed;
  ck.layout_ = DitLayout::procedural;
  ck.config_ = config;
  ck.config_source_ = "the caller";
  ck.detection_reason_ = fmt::format("procedural weights, seed {}", seed);
  for (const auto& [k, s] : config.parameters()) ck.sources_[k] = Source{-1, k};
  return ck;
}

std::string DitCheckpoint::detection_summary() const {
  return fmt::format("{}: layout {} ({}); config from {}", path_, layout_name(layout_), detection_reason_,
                     config_source_);
}

DType DitCheckpoint::stored_dtype(const std::string& key) const {
  auto it = sources_.find(key);
  if (it == sources_.end()) fail("{}: no parameter '{}'", path_, key);
  if (it->second.file < 0) return DType::f32;
  return files_[it->second.file]->info(it->second.key).dtype;
}

Tensor DitCheckpoint::get(const std::string& key, Device device) const {
  if (device == Device::cpu) return get(key);
  auto it = sources_.find(key);
  if (it != sources_.end() && it->second.file < 0 && loras_.empty())
    for (const auto& [k, s] : config_.parameters())
      if (k == key) return procedural_tensor(k, s, seed_, device);
  return get(key).to_device(device);
}

Tensor DitCheckpoint::get_base(const std::string& key) const {
  auto it = sources_.find(key);
  if (it == sources_.end()) fail("{}: no parameter '{}'", path_, key);
  const Source& src = it->second;
  if (src.file < 0) {
    for (const auto& [k, s] : config_.parameters())
      if (k == key) return procedural_tensor(k, s, seed_);
  }
  Tensor t = files_[src.file]->get(src.key);
  if (src.quant.kind == QuantSpec::nvfp4) {
    const Tensor s2 = files_[src.file]->get(src.quant.scale2_key);
    if (s2.numel() != 1)
      fail("{}: '{}' is {}, expected one f32 value", files_[src.file]->path(), src.quant.scale2_key, s2.describe());
    t = dequantize_nvfp4(t, files_[src.file]->get(src.quant.scale_key), static_cast<float>(s2.get(0)),
                         files_[src.file]->path() + ": '" + src.key + "'");
  } else if (src.quant.kind != QuantSpec::none)
    t = dequantize_weight(t, files_[src.file]->get(src.quant.scale_key), src.quant,
                          files_[src.file]->path() + ": '" + src.key + "'");
  // An integer tensor where a float weight belongs would be read as numbers it never meant.
  H3_CHECK(dtype_is_float(t.dtype()),
           "{}: weight '{}' is stored as {}; DiT weights must be float (F32, F16, BF16, F64) or a quantized format "
           "with its scales: is this the right file?",
           files_[src.file]->path(), src.key, dtype_safetensors_name(t.dtype()));
  // NaN / Inf are refused where they enter: in a run they turn every output into NaN, found only at its end.
  if (const NonFinite bad = find_non_finite(t); bad.count > 0)
    fail(
        "{}: weight '{}' holds {} non-finite values (NaN or Inf), the first at element {}; the checkpoint is "
        "damaged (download or convert it again)",
        files_[src.file]->path(), src.key, bad.count, bad.first);
  if (src.kind == Source::plain) return t;
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(t.dtype());
  const auto* in = static_cast<const std::byte*>(t.raw());
  if (src.kind == Source::swap_halves) {  // [gate; value] -> [value; gate]
    Tensor out(t.dtype(), t.shape());
    auto* o = static_cast<std::byte*>(out.raw());
    const int64_t half = rows / 2;
    std::memcpy(o, in + half * row_bytes, half * row_bytes);
    std::memcpy(o + half * row_bytes, in, half * row_bytes);
    return out;
  }
  // qkv part: blocked rows [part*inner, (part+1)*inner); interleaved row of head h, channel d of part p is
  // h*3*D + p*D + d.
  const int64_t inner = rows / 3, D = config_.attention_head_dim, heads = inner / D;
  Tensor out(t.dtype(), {inner, cols});
  auto* o = static_cast<std::byte*>(out.raw());
  if (qkv_order_ == QkvOrder::blocked) {
    std::memcpy(o, in + src.part * inner * row_bytes, inner * row_bytes);
  } else {
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(o + h * D * row_bytes, in + (h * 3 * D + src.part * D) * row_bytes, D * row_bytes);
  }
  return out;
}

std::optional<DitCheckpoint::StoredRead> DitCheckpoint::stored_read(const std::string& key,
                                                                    const std::vector<RowRange>& rows,
                                                                    RowRange cols) const {
  auto it = sources_.find(key);
  if (it == sources_.end()) fail("{}: no parameter '{}'", path_, key);
  const Source& src = it->second;
  if (src.file < 0 || !loras_.empty()) return std::nullopt;
  const SafeTensors& f = *files_[src.file];
  const TensorInfo& ti = f.info(src.key);
  StoredRead out;
  if (src.quant.kind == QuantSpec::fp8) {
    const Tensor s = f.get(src.quant.scale_key);
    if (ti.dtype != DType::fp8_e4m3 || s.numel() != 1 || !dtype_is_float(s.dtype()))
      return std::nullopt;  // the host path reports what is wrong
    out.fp8_scale = static_cast<float>(s.get(0));
    if (!(out.fp8_scale > 0) || !std::isfinite(out.fp8_scale)) return std::nullopt;
  } else if (src.quant.kind != QuantSpec::none || !dtype_is_float(ti.dtype)) {
    return std::nullopt;  // the host path dequantizes, or refuses an integer tensor where a float weight belongs
  }
  if (ti.shape.empty()) return std::nullopt;
  // The parameter's row i is stored row row_of(i) of the file's tensor (index equations at get_base).
  const int64_t stored_rows = ti.shape[0];
  int64_t n = stored_rows, half = stored_rows / 2, inner = stored_rows / 3;
  const int64_t D = config_.attention_head_dim;
  if (src.kind == Source::qkv_part) n = inner;
  auto row_of = [&](int64_t i) -> int64_t {
    switch (src.kind) {
      case Source::plain:
        return i;
      case Source::swap_halves:  // [gate; value] stored, [value; gate] wanted
        return i < half ? half + i : i - half;
      case Source::qkv_part:
        return qkv_order_ == QkvOrder::blocked ? src.part * inner + i : (i / D) * 3 * D + src.part * D + i % D;
    }
    return i;
  };
  std::vector<RowRange> want = rows.empty() ? std::vector<RowRange>{{0, n}} : rows;
  std::vector<RowRange> stored;
  for (const RowRange& r : want) {
    if (r.begin < 0 || r.end > n || r.begin > r.end)
      fail("{}: rows [{}, {}) of '{}' lie outside its {} rows", path_, r.begin, r.end, key, n);
    for (int64_t i = r.begin; i < r.end; ++i) {
      const int64_t s = row_of(i);
      if (!stored.empty() && stored.back().end == s)
        ++stored.back().end;
      else
        stored.push_back({s, s + 1});
    }
  }
  out.read = read_rows(f, src.key, stored, cols);
  return out;
}

std::shared_ptr<const void> DitCheckpoint::keep_files() const {
  return std::make_shared<const std::vector<std::shared_ptr<SafeTensors>>>(files_);
}

size_t DitCheckpoint::stored_bytes() const {
  size_t total = 0;
  std::set<std::pair<int, std::string>> seen;
  for (const auto& [k, src] : sources_) {
    if (src.file < 0) {
      for (const auto& [pk, s] : config_.parameters())
        if (pk == k) total += shape_numel(s) * 4;
      continue;
    }
    if (!seen.insert({src.file, src.key}).second) continue;
    const auto& ti = files_[src.file]->info(src.key);
    total += ti.end - ti.begin;
  }
  return total;
}

std::map<std::string, int64_t> DitCheckpoint::quant_counts() const {
  std::map<std::string, int64_t> counts;
  for (const auto& [k, src] : sources_) {
    switch (src.quant.kind) {
      case QuantSpec::none:
        break;
      case QuantSpec::fp8:
        counts["fp8"] += 1;
        break;
      case QuantSpec::int8:
        counts[src.quant.convrot_group > 0 ? "int8-convrot" : "int8"] += 1;
        break;
      case QuantSpec::nvfp4:
        counts["nvfp4"] += 1;
        break;
      case QuantSpec::mxfp8:
        counts["mxfp8"] += 1;
        break;
    }
  }
  return counts;
}

std::map<DType, int64_t> DitCheckpoint::dtype_counts() const {
  std::map<DType, int64_t> counts;
  for (const auto& [k, src] : sources_) counts[stored_dtype(k)] += 1;
  return counts;
}

}  // namespace h3

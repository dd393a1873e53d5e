#include "model/dit/lora.h"

#include <charconv>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "core/error.h"
#include "core/hash.h"
#include "core/knobs.h"
#include "core/log.h"
#include "core/names.h"
#include "core/parallel.h"
#include "io/safetensors.h"
#include "model/dit/checkpoint.h"

namespace h3 {

std::string_view lora_layout_name(LoraLayout l) {
  static constexpr std::array<Named<LoraLayout>, 4> names{
      {{LoraLayout::ai_toolkit, "ai-toolkit (diffusion_model. prefix, lora_A/lora_B)"},
       {LoraLayout::reference, "reference (lora_A/lora_B, no prefix)"},
       {LoraLayout::kohya, "kohya/musubi (lora_unet_*, lora_down/lora_up/alpha)"},
       {LoraLayout::peft, "peft/DiffSynth (lora_A.default/lora_B.default, interleaved qkv)"}}};
  return name_in(names, l);
}

namespace {

bool ends_with(const std::string& s, const std::string& e) {
  return s.size() >= e.size() && s.compare(s.size() - e.size(), e.size(), e) == 0;
}
bool starts_with(const std::string& s, const std::string& p) {
  return s.rfind(p, 0) == 0;
}

// Where a module's delta goes: one diffusers parameter, the released fused qkv (cut into thirds), or the
// released fc1 ([gate; value] -> [value; gate]).
struct Resolved {
  enum Kind { plain, qkv, fc1 } kind = plain;
  std::string key;  // plain / fc1: the diffusers parameter; qkv: the "…attn." prefix
};

// Every module name a LoRA may target, released and diffusers spellings, for this config.
std::map<std::string, Resolved> module_table(const DitConfig& c) {
  std::map<std::string, Resolved> t;
  for (const auto& [k, s] : c.parameters())
    if (s.size() == 2 && ends_with(k, ".weight")) t[k.substr(0, k.size() - 7)] = {Resolved::plain, k};
  std::vector<std::string> official = {"video_patch_proj",       "audio_patch_proj",
                                       "condition_proj",         "time_embedder.proj_in",
                                       "time_embedder.proj_out", "final_layer.adaln_proj.linear",
                                       "final_layer.video_out",  "final_layer.audio_out"};
  auto block = [&](const std::string& p, bool adaln) {
    for (const char* m : {"attn.qkv_proj", "attn.out_proj", "mlp.fc1", "mlp.fc2"}) official.push_back(p + m);
    if (adaln) official.push_back(p + "adaln_proj.linear");
  };
  for (int n = 0; n < c.num_layers; ++n) block("blocks." + std::to_string(n) + ".", true);
  for (int r = 0; r < c.num_refiner_layers; ++r) block("token_refiner.blocks." + std::to_string(r) + ".", false);
  for (const auto& o : official) {
    std::string d = dit_official_to_diffusers(o + ".weight");
    H3_ASSERT(!d.empty(), "no diffusers name for '{}'", o);
    if (ends_with(o, "qkv_proj"))
      t[o] = {Resolved::qkv, d.substr(0, d.size() - std::strlen("qkv_proj.weight"))};
    else if (ends_with(o, "mlp.fc1"))
      t[o] = {Resolved::fc1, d};
    else
      t[o] = {Resolved::plain, d};
  }
  return t;
}

Shape param_shape(const DitConfig& c, const std::string& key) {
  for (const auto& [k, s] : c.parameters())
    if (k == key) return s;
  fail("no DiT parameter '{}'", key);
}

double parse_number(const std::string& s, const std::string& what) {
  try {
    size_t used = 0;
    double v = std::stod(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception&) {
  }
  fail("{}: '{}' is not a number", what, s);
}

}  // namespace

std::pair<std::string, double> parse_lora_spec(const std::string& spec) {
  auto colon = spec.rfind(':');
  if (colon != std::string::npos && colon + 1 < spec.size()) {
    const std::string tail = spec.substr(colon + 1);
    double v = 0;
    auto [end, ec] = std::from_chars(tail.data(), tail.data() + tail.size(), v);
    if (ec == std::errc() && end == tail.data() + tail.size()) return {spec.substr(0, colon), v};
  }
  if (spec.empty()) fail("--lora: empty value (give FILE or FILE:STRENGTH)");
  return {spec, 1.0};
}

namespace {

// Which layout a LoRA file is in, from its key suffixes and prefixes.
LoraLayout detect_lora_layout(const SafeTensors& st, const std::string& path) {
  bool kohya = false, plain_ab = false, peft_default = false, ai_prefix = false;
  for (const auto& k : st.keys()) {
    if (k.find(".lora_down.") != std::string::npos || k.find(".lora_up.") != std::string::npos)
      kohya = true;
    else if (k.find(".lora_A.default.") != std::string::npos || k.find(".lora_B.default.") != std::string::npos)
      peft_default = true;
    else if (k.find(".lora_A.") != std::string::npos || k.find(".lora_B.") != std::string::npos)
      plain_ab = true;
    if (starts_with(k, "diffusion_model.")) ai_prefix = true;
  }
  if (int(kohya) + int(plain_ab || peft_default) == 0)
    fail("{}: no LoRA keys (expected '<module>.lora_A.weight'/'lora_B.weight' or kohya 'lora_down'/'lora_up')", path);
  if (kohya && (plain_ab || peft_default))
    fail("{}: mixes kohya (lora_down/lora_up) and PEFT (lora_A/lora_B) keys; give one LoRA per file", path);
  return kohya          ? LoraLayout::kohya
         : peft_default ? LoraLayout::peft
         : ai_prefix    ? LoraLayout::ai_toolkit
                        : LoraLayout::reference;
}

// Whether the qkv deltas' rows are interleaved per head: the override (0 or 1), else the file's metadata, else the
// layout's habit (PEFT/DiffSynth interleaves).
bool detect_qkv_interleaved(const SafeTensors& st, LoraLayout layout, int interleaved_override) {
  std::string qkv_meta;
  for (const auto& [k, v] : st.metadata())
    if (k.find("qkv") != std::string::npos || v.find("qkv") != std::string::npos) qkv_meta += v + " ";
  return interleaved_override >= 0                           ? interleaved_override == 1
         : qkv_meta.find("interleaved") != std::string::npos ? true
         : qkv_meta.find("blocked") != std::string::npos     ? false
                                                             : layout == LoraLayout::peft;
}

// One LoRA module's tensors: lora_A / lora_down, lora_B / lora_up and its optional alpha.
struct Parts {
  std::string down_key, up_key, alpha_key;
};

// The file's keys grouped by module; any key of another kind is refused.
std::map<std::string, Parts> group_modules(const SafeTensors& st, const std::string& path) {
  std::map<std::string, Parts> modules;
  std::vector<std::string> unknown;
  for (const auto& k : st.keys()) {
    std::string m, role;
    for (auto [suffix, r] : {std::pair{".lora_A.default.weight", "down"},
                             {".lora_B.default.weight", "up"},
                             {".lora_A.weight", "down"},
                             {".lora_B.weight", "up"},
                             {".lora_down.weight", "down"},
                             {".lora_up.weight", "up"},
                             {".alpha", "alpha"}}) {
      if (ends_with(k, suffix)) {
        m = k.substr(0, k.size() - std::strlen(suffix));
        role = r;
        break;
      }
    }
    if (role.empty()) {
      unknown.push_back(k);
      continue;
    }
    auto& p = modules[m];
    std::string& slot = role == "down" ? p.down_key : role == "up" ? p.up_key : p.alpha_key;
    if (!slot.empty()) fail("{}: module '{}' has two {} tensors ('{}' and '{}')", path, m, role, slot, k);
    slot = k;
  }
  if (!unknown.empty())
    fail(
        "{}: key '{}' is not a LoRA tensor of a known layout ({} such keys; expected lora_A/lora_B, "
        "lora_down/lora_up/alpha)",
        path, unknown.front(), unknown.size());
  return modules;
}

// The DiT module that LoRA module m adapts, in the spelling of module_table: kohya's "lora_unet_blocks_0_attn_qkv_proj"
// through `kohya_names`, the other layouts with their prefix taken off.
std::string dit_module_name(const std::string& m, const Parts& p, bool kohya,
                            const std::map<std::string, std::string>& kohya_names, const std::string& path) {
  std::string name = m;
  if (kohya) {
    if (!starts_with(name, "lora_unet_"))
      fail("{}: key '{}': kohya modules must start with 'lora_unet_'", path, p.down_key);
    auto it = kohya_names.find(name.substr(10));
    if (it == kohya_names.end()) fail("{}: key '{}' names no module of this DiT", path, p.down_key);
    return it->second;
  }
  for (const char* pre : {"model.diffusion_model.", "diffusion_model.", "base_model.model.", "transformer."})
    if (starts_with(name, pre)) return name.substr(std::strlen(pre));
  return name;
}

// One module's delta checked and added to lf.targets: down [rank, in], up [out, rank] in f32, its scale
// strength * alpha / rank, the released fc1's halves swapped and its qkv cut into thirds (per head when interleaved).
void add_module(LoraFile& lf, const SafeTensors& st, const std::string& m, const Parts& p, const std::string& name,
                const Resolved& res, const DitConfig& config, std::optional<double> meta_alpha) {
  const std::string& path = lf.path;
  Tensor A = st.get(p.down_key), B = st.get(p.up_key);
  if (A.ndim() != 2 || B.ndim() != 2 || A.dim(0) != B.dim(1) || A.dim(0) <= 0)
    fail("{}: key '{}' {} and '{}' {}: expected lora_A [rank, in] and lora_B [out, rank] with one rank", path,
         p.down_key, shape_str(A.shape()), p.up_key, shape_str(B.shape()));
  const int64_t rank = A.dim(0);
  Shape base = param_shape(config, res.kind == Resolved::qkv ? res.key + "to_q.weight" : res.key);
  const int64_t out_rows = res.kind == Resolved::qkv ? 3 * base[0] : base[0];
  if (A.dim(1) != base[1] || B.dim(0) != out_rows)
    fail("{}: key '{}' {} / '{}' {} do not fit '{}' [{}, {}] (lora_A must be [rank, {}], lora_B [{}, rank])", path,
         p.down_key, shape_str(A.shape()), p.up_key, shape_str(B.shape()), name, out_rows, base[1], base[1], out_rows);
  double alpha = static_cast<double>(rank);
  if (!p.alpha_key.empty()) {
    Tensor a = st.get(p.alpha_key);
    if (a.numel() != 1) fail("{}: key '{}' {} must hold one value", path, p.alpha_key, shape_str(a.shape()));
    alpha = a.get(0);
  } else if (meta_alpha) {
    alpha = *meta_alpha;
  }
  // Non-finite numbers are refused here, where they enter: merged, they would turn every output into NaN.
  if (!std::isfinite(alpha))
    fail("{}: module '{}' has alpha {}; a LoRA's alpha must be a finite number", path, m, alpha);
  for (const auto& [key, t] : {std::pair<const std::string&, const Tensor&>{p.down_key, A}, {p.up_key, B}})
    if (!dtype_is_float(t.dtype()))
      fail("{}: key '{}' is stored as {}; LoRA weights must be float (F32, F16, BF16)", path, key,
           dtype_safetensors_name(t.dtype()));
  const double scale = lf.strength * alpha / static_cast<double>(rank);
  A = A.to(DType::f32);
  B = B.to(DType::f32);
  for (const auto& [key, t] : {std::pair<const std::string&, const Tensor&>{p.down_key, A}, {p.up_key, B}}) {
    const float* v = t.data<float>();
    for (int64_t i = 0; i < t.numel(); ++i)
      if (!std::isfinite(v[i]))
        fail("{}: key '{}' holds a non-finite value (NaN or Inf) at element {}; the LoRA is damaged", path, key, i);
  }
  lf.ranks[rank] += 1;
  lf.modules += 1;
  auto add = [&](const std::string& key, Tensor up) {
    if (lf.targets.count(key)) fail("{}: module '{}' adapts '{}' a second time", path, m, key);
    lf.targets[key] = LoraTarget{m, A, std::move(up), scale};
  };
  const size_t row_bytes = static_cast<size_t>(rank) * sizeof(float);
  const auto* b = static_cast<const std::byte*>(B.raw());
  if (res.kind == Resolved::plain) {
    add(res.key, B);
  } else if (res.kind == Resolved::fc1) {  // [gate; value] -> [value; gate]
    const int64_t half = out_rows / 2;
    Tensor o(DType::f32, B.shape());
    std::memcpy(o.raw(), b + half * row_bytes, half * row_bytes);
    std::memcpy(static_cast<std::byte*>(o.raw()) + half * row_bytes, b, half * row_bytes);
    add(res.key, o);
  } else {  // qkv thirds; interleaved row of head h, channel d of part p is h*3*D + p*D + d
    const int64_t inner = base[0], D = config.attention_head_dim, heads = inner / D;
    const char* parts[3] = {"to_q.weight", "to_k.weight", "to_v.weight"};
    for (int part = 0; part < 3; ++part) {
      Tensor o(DType::f32, {inner, rank});
      auto* dst = static_cast<std::byte*>(o.raw());
      if (!lf.qkv_interleaved)
        std::memcpy(dst, b + part * inner * row_bytes, inner * row_bytes);
      else
        for (int64_t h = 0; h < heads; ++h)
          std::memcpy(dst + h * D * row_bytes, b + (h * 3 * D + part * D) * row_bytes, D * row_bytes);
      add(res.key + parts[part], o);
    }
  }
}

}  // namespace

LoraFile LoraFile::open(const std::string& path, double strength, const DitConfig& config, int interleaved_override) {
  if (!std::isfinite(strength)) fail("LoRA {}: strength {} is not a finite number", path, strength);
  SafeTensors st = SafeTensors::open(path);
  LoraFile lf;
  lf.path = path;
  lf.strength = strength;
  lf.layout = detect_lora_layout(st, path);
  const bool kohya = lf.layout == LoraLayout::kohya;
  lf.qkv_interleaved = detect_qkv_interleaved(st, lf.layout, interleaved_override);

  std::optional<double> meta_alpha;
  for (const char* mk : {"alpha", "lora_alpha", "ss_network_alpha"})
    if (!st.meta(mk).empty()) meta_alpha = parse_number(st.meta(mk), path + ": metadata '" + mk + "'");

  const auto table = module_table(config);
  std::map<std::string, std::string> kohya_names;  // "blocks_0_attn_qkv_proj" -> "blocks.0.attn.qkv_proj"
  if (kohya)
    for (const auto& [name, r] : table) {
      std::string u = name;
      for (char& ch : u)
        if (ch == '.') ch = '_';
      kohya_names[u] = name;
    }

  for (const auto& [m, p] : group_modules(st, path)) {
    if (p.down_key.empty() || p.up_key.empty())
      fail("{}: module '{}' lacks its {} tensor", path, m, p.down_key.empty() ? "lora_A/lora_down" : "lora_B/lora_up");
    const std::string name = dit_module_name(m, p, kohya, kohya_names, path);
    auto it = table.find(name);
    if (it == table.end())
      fail("{}: key '{}' targets '{}', which is not a linear layer of this DiT ({} layers, {} refiner layers)", path,
           p.down_key, name, config.num_layers, config.num_refiner_layers);
    add_module(lf, st, m, p, name, it->second, config, meta_alpha);
  }
  Fnv1a fnv;
  fnv.f64(strength);
  for (const auto& [key, t] : lf.targets) {
    fnv.str(key);
    fnv.f64(t.scale);
    fnv.bytes(t.down.raw(), t.down.nbytes());
    fnv.bytes(t.up.raw(), t.up.nbytes());
  }
  lf.digest = fnv.h;
  return lf;
}

std::string LoraFile::describe() const {
  std::string r;
  for (const auto& [rk, n] : ranks) r += fmt::format("{}{} x rank {}", r.empty() ? "" : ", ", n, rk);
  std::map<std::string, int> kinds;
  for (const auto& [key, t] : targets) {
    std::string k = key;
    if (auto p = k.find("transformer_blocks."); p == 0)
      k = "blocks: " + k.substr(k.find('.', 19) + 1);
    else if (k.rfind("token_refiner.refiner_blocks.", 0) == 0)
      k = "refiner: " + k.substr(k.find('.', 29) + 1);
    kinds[k] += 1;
  }
  std::string tg;
  for (const auto& [k, n] : kinds) tg += fmt::format("\n    {:<40} {}", k, n);
  return fmt::format(
      "{}: LoRA, layout {}, {} modules ({}), {} adapted parameters, qkv lora_B rows {}, strength {}, "
      "digest {:016x}\n  targets (parameter: count):{}",
      path, lora_layout_name(layout), modules, r, targets.size(), qkv_interleaved ? "per-head interleaved" : "blocked",
      strength, digest, tg);
}

Tensor lora_merge(const Tensor& base, const std::string& key, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                  const std::vector<std::shared_ptr<const LoraFile>>& loras) {
  std::vector<const LoraTarget*> hits;
  for (const auto& l : loras)
    if (auto it = l->targets.find(key); it != l->targets.end()) hits.push_back(&it->second);
  if (hits.empty()) return base;
  H3_ASSERT(base.ndim() == 2 && base.dim(0) == r1 - r0 && base.dim(1) == c1 - c0 && !base.on_device(),
            "lora_merge: block {} for rows [{}, {}) cols [{}, {}) of '{}'", base.describe(), r0, r1, c0, c1, key);
  const bool f64 = base.dtype() == DType::f64;
  Tensor out = base.to(f64 ? DType::f64 : DType::f32);
  const int64_t C = c1 - c0;
  for (const LoraTarget* t : hits) {
    const int64_t rank = t->down.dim(0), in = t->down.dim(1);
    H3_ASSERT(r1 <= t->up.dim(0) && c1 <= in, "lora_merge: '{}' slice outside the adapter", key);
    const float* A = t->down.data<float>();
    const float* B = t->up.data<float>();
    // Rows are independent (each element's sum runs over r alone), so the thread split never changes a value.
    parallel_for(
        r1 - r0,
        [&](int64_t i0, int64_t i1) {
          std::vector<double> acc(static_cast<size_t>(C));
          for (int64_t i = i0; i < i1; ++i) {
            std::fill(acc.begin(), acc.end(), 0.0);
            const float* brow = B + (r0 + i) * rank;
            for (int64_t r = 0; r < rank; ++r) {
              const double b = brow[r];
              const float* arow = A + r * in + c0;
              for (int64_t j = 0; j < C; ++j) acc[j] += b * static_cast<double>(arow[j]);
            }
            if (f64) {
              double* o = out.data<double>() + i * C;
              for (int64_t j = 0; j < C; ++j) o[j] = o[j] + t->scale * acc[j];
            } else {
              float* o = out.data<float>() + i * C;
              for (int64_t j = 0; j < C; ++j) o[j] = static_cast<float>(static_cast<double>(o[j]) + t->scale * acc[j]);
            }
          }
        },
        16);
  }
  return out;
}

bool looks_like_lora(const std::string& path) {
  SafeTensors st = SafeTensors::open(path);
  for (const auto& k : st.keys())
    for (const char* s : {".lora_A.", ".lora_B.", ".lora_down.", ".lora_up."})
      if (k.find(s) != std::string::npos) return true;
  return false;
}

void add_loras(DitCheckpoint& ck, const std::vector<std::string>& specs, int world_rank) {
  std::vector<std::string> use = specs;
  if (const std::string& v = knobs().debug_lora; !v.empty()) {
    const auto colon = v.find(':');
    if (colon != std::string::npos && v.substr(0, colon) == std::to_string(world_rank)) {
      spdlog::warn("H3_DEBUG_LORA: rank {} loads '{}' instead of the --lora list", world_rank, v.substr(colon + 1));
      use = {v.substr(colon + 1)};
    }
  }
  for (const auto& spec : use) {
    auto [file, strength] = parse_lora_spec(spec);
    ck.add_lora(file, strength);
    spdlog::info("{}", ck.loras().back()->describe());
  }
}

// ---- DitCheckpoint's LoRA side (declared in model/dit/checkpoint.h) ----

void DitCheckpoint::add_lora(const std::string& path, double strength, int interleaved_override) {
  loras_.push_back(std::make_shared<const LoraFile>(LoraFile::open(path, strength, config_, interleaved_override)));
}

uint64_t DitCheckpoint::lora_digest() const {
  Fnv1a f;
  const uint64_t n = loras_.size();
  f.bytes(&n, sizeof(n));
  for (const auto& l : loras_) f.bytes(&l->digest, sizeof(l->digest));
  return f.h;
}

Tensor DitCheckpoint::get(const std::string& key) const {
  Tensor t = get_base(key);
  if (loras_.empty() || t.ndim() != 2) return t;
  return lora_merge(t, key, 0, t.dim(0), 0, t.dim(1), loras_);
}

Tensor DitCheckpoint::get_rows(const std::string& key, int64_t begin, int64_t end) const {
  Tensor t = get_base(key);
  H3_ASSERT(t.ndim() == 2 && 0 <= begin && begin <= end && end <= t.dim(0), "get_rows('{}', {}, {}) of {}", key, begin,
            end, t.describe());
  Tensor part = begin == 0 && end == t.dim(0) ? t : t.rows(begin, end);
  return loras_.empty() ? part : lora_merge(part, key, begin, end, 0, t.dim(1), loras_);
}

Tensor DitCheckpoint::get_columns(const std::string& key, int64_t begin, int64_t end) const {
  Tensor t = get_base(key);
  H3_ASSERT(t.ndim() == 2 && 0 <= begin && begin <= end && end <= t.dim(1), "get_columns('{}', {}, {}) of {}", key,
            begin, end, t.describe());
  const int64_t R = t.dim(0), C = end - begin;
  Tensor part = t;
  if (C != t.dim(1)) {
    part = Tensor(t.dtype(), {R, C});
    const size_t es = dtype_size(t.dtype());
    for (int64_t i = 0; i < R; ++i)
      std::memcpy(static_cast<std::byte*>(part.raw()) + i * C * es,
                  static_cast<const std::byte*>(t.raw()) + (i * t.dim(1) + begin) * es, C * es);
  }
  return loras_.empty() ? part : lora_merge(part, key, 0, R, begin, end, loras_);
}

}  // namespace h3

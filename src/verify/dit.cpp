#include "verify/dit.h"

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/compare.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "io/procedural.h"
#include "model/dit/lora.h"

namespace h3 {

namespace {
std::string key(const std::string& c, const std::string& rest) {
  return c.empty() ? rest : c + "." + rest;
}

nlohmann::json meta_json(const SafeTensors& f, const std::string& k) {
  std::string s = f.meta(k);
  if (s.empty()) return nullptr;
  try {
    return parse_json_bounded(s, k, kJsonMaxDepth, false);
  } catch (const std::exception&) {
    return nullptr;
  }
}

}  // namespace

// The reference's own bf16 error per output (video, audio), from the file's metadata.
std::optional<std::pair<double, double>> dit_reference_bf16_error(const SafeTensors& f, const std::string& c) {
  auto pick = [](const nlohmann::json& j) -> std::optional<std::pair<double, double>> {
    if (j.is_array() && j.size() == 2 && j[0].is_number() && j[1].is_number())
      return std::pair{j[0].get<double>(), j[1].get<double>()};
    return std::nullopt;
  };
  if (auto cases = meta_json(f, "cases"); cases.is_object() && cases.contains(c)) {
    const auto& r = cases[c];
    if (r.contains("reference_rel_l2_vs_f64") && r["reference_rel_l2_vs_f64"].contains("bf16"))
      return pick(r["reference_rel_l2_vs_f64"]["bf16"]);
  }
  if (auto j = meta_json(f, "reference_bf16_rel_l2_vs_f64"); !j.is_null()) return pick(j);
  return std::nullopt;
}

void VerifyReport::add(const std::string& what, const Tensor& got, const Tensor& ref, double tol) {
  const Diff d = compare(got, ref);
  lines.push_back({what, d.rel_l2, d.max_abs, tol, d.shape_ok && d.rel_l2 <= tol});
}

void VerifyReport::add_exact(const std::string& what, bool ok) {
  lines.push_back({what, ok ? 0.0 : 1.0, ok ? 0.0 : 1.0, 0.0, ok});
}

bool VerifyReport::pass() const {
  if (lines.empty()) return false;
  for (const auto& l : lines)
    if (!l.pass) return false;
  return true;
}

void VerifyReport::print(std::FILE* out) const {
  std::fprintf(out, "%-34s %12s %12s %10s  %s\n", "output", "rel_l2", "max_abs", "tolerance", "result");
  int failed = 0;
  for (const auto& l : lines) {
    std::fprintf(out, "%-34s %12.3e %12.3e %10.1e  %s\n", l.what.c_str(), l.rel_l2, l.max_abs, l.tolerance,
                 l.pass ? "ok" : "FAIL");
    failed += !l.pass;
  }
  if (pass())
    std::fprintf(out, "PASS: %zu of %zu checks within tolerance\n", lines.size(), lines.size());
  else
    std::fprintf(out, "FAIL: %d of %zu checks out of tolerance\n", lines.empty() ? 1 : failed, lines.size());
}

bool looks_like_dit_golden(const SafeTensors& f) {
  for (const auto& k : f.keys())
    if (k == "input.position_ids" ||
        (k.ends_with(".input.position_ids") && f.has(k.substr(0, k.size() - 19) + ".input.hidden_states")))
      return f.has(k.substr(0, k.size() - 12) + "hidden_states");
  return false;
}

std::vector<std::string> dit_golden_cases(const SafeTensors& f) {
  std::vector<std::string> cases;
  for (const auto& k : f.keys()) {
    if (k == "input.hidden_states")
      cases.push_back("");
    else if (k.ends_with(".input.hidden_states"))
      cases.push_back(k.substr(0, k.size() - 20));
  }
  std::sort(cases.begin(), cases.end());
  return cases;
}

DitInputs dit_golden_inputs(const SafeTensors& f, const std::string& c) {
  auto get = [&](const char* n) { return f.get(key(c, std::string("input.") + n)); };
  DitInputs in;
  in.video = get("hidden_states");
  in.audio = get("audio_hidden_states");
  in.text = get("encoder_hidden_states");
  in.timestep = get("timestep");
  in.timestep_indices = get("timestep_indices");
  in.token_tags = get("token_tags");
  in.position_ids = get("position_ids");
  in.video_indices = get("video_indices");
  in.audio_indices = get("audio_indices");
  in.text_indices = get("text_indices");
  return in;
}

DitCheckpoint dit_golden_weights(const SafeTensors& f, const std::string& override_path) {
  if (!override_path.empty()) return DitCheckpoint::open(override_path);
  if (f.has("weight.proj_in.weight")) return DitCheckpoint::open(f.path());
  // No weights inside: the metadata says "procedural" with a seed and a config over the released defaults.
  std::string w = f.meta("weights");
  if (w.find("procedural") == std::string::npos)
    fail("{}: holds no 'weight.' tensors and its metadata does not say the weights are procedural; pass --weights",
         f.path());
  uint64_t seed = kDefaultProceduralSeed;
  if (!f.meta("seed").empty()) seed = std::stoull(f.meta("seed"));
  DitConfig cfg = f.meta("config").empty() ? DitConfig{} : DitConfig::from_json_text(f.meta("config"), f.path());
  DitCheckpoint ck = DitCheckpoint::procedural(cfg, seed, f.path() + " (procedural weights)");
  return ck;
}

VerifyReport verify_dit_file(const SafeTensors& f, const VerifyOptions& opt) {
  DitCheckpoint ck = dit_golden_weights(f, opt.weights);
  add_loras(ck, opt.loras, world().rank());
  spdlog::info("{}", ck.detection_summary());
  DistPlan plan = DistPlan::single();
  if (opt.dist) {
    DistOptions d = *opt.dist;
    if (opt.device == Device::cuda) d.gpu_bus = gpu_bus_id();
    plan = DistPlan::make(world(), d, ck.config().num_attention_heads, ck.config().ffn_dim);
  }
  if (opt.dist) spdlog::info("{}", plan.describe());
  DitModel model(ck, opt.precision, plan, opt.device, opt.numerics);
  VerifyReport rep;
  for (const auto& c : dit_golden_cases(f)) {
    DitInputs in = dit_golden_inputs(f, c);
    const bool check_acts = opt.precision == Precision::f32 || opt.precision == Precision::f64;
    DitOutputs out = model.forward(in, check_acts);
    std::optional<std::pair<double, double>> ref_bf16 = dit_reference_bf16_error(f, c);
    auto tol_for = [&](int which) {
      if (opt.tolerance) return *opt.tolerance;
      switch (opt.precision) {
        case Precision::f64:
          return 1e-10;
        case Precision::f32:
          return 1e-5;
        case Precision::bf16:
          if (!ref_bf16) fail("{}: no reference bf16 error in the metadata; pass --tol", f.path());
          return 1.5 * (which == 0 ? ref_bf16->first : ref_bf16->second);
        case Precision::fp8:
          return 4e-2;  // per-tensor FP8 GEMMs (issue 4's bound on dit-fullwidth-1block)
      }
      return 0.0;
    };
    std::string label = c.empty() ? "" : c + " ";
    if (!opt.dump_prefix.empty()) {
      const std::string& dump = opt.dump_prefix;
      std::vector<std::pair<std::string, Tensor>> ts;
      for (const auto& [n, t] : out.activations) ts.push_back({key(c, "act." + n), t});
      ts.push_back({key(c, "output.video"), out.video});
      ts.push_back({key(c, "output.audio"), out.audio});
      write_safetensors(dump + (c.empty() ? "" : "." + c) + ".safetensors", ts);
    }
    auto add = [&](const std::string& what, const Tensor& got, const Tensor& ref, double tol) {
      rep.add(label + what, got, ref, tol);
    };
    add("video", out.video, f.get(key(c, "output.f64.video")), tol_for(0));
    add("audio", out.audio, f.get(key(c, "output.f64.audio")), tol_for(1));
    if (check_acts) {
      for (const auto& [name, t] : out.activations) {
        std::string k = key(c, "act." + name);
        if (f.has(k)) add("act." + name, t, f.get(k), tol_for(0));
      }
    }
  }
  return rep;
}

}  // namespace h3

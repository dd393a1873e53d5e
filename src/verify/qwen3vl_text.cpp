#include "verify/qwen3vl_text.h"

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/compare.h"
#include "core/files.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/tokenizer.h"

namespace h3 {

namespace {

std::vector<std::string> qwen3vl_text_cases(const SafeTensors& f) {
  std::vector<std::string> cases;
  for (const auto& k : f.keys())
    if (k.ends_with(".input_ids")) cases.push_back(k.substr(0, k.size() - 10));
  std::sort(cases.begin(), cases.end(), [](const std::string& a, const std::string& b) {
    return a.size() != b.size() ? a.size() < b.size() : a < b;  // L1, L13, L40 in length order
  });
  return cases;
}

// A short printable label for a case string (non-ASCII bytes as '?', control characters as '.').
std::string preview(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (out.size() >= 16) {
      out += "..";
      break;
    }
    const auto u = static_cast<unsigned char>(c);
    out += u >= 0x80 ? '?' : (u < 0x20 || u == 0x7f) ? '.' : c;
  }
  return out;
}

}  // namespace

bool looks_like_qwen3vl_text_golden(const SafeTensors& f) {
  if (!f.has("weight.embed_tokens.weight") || !f.has("weight.layers.0.self_attn.q_norm.weight")) return false;
  for (const auto& k : f.keys())
    if (k.ends_with(".input_ids")) return true;
  return false;
}

VerifyReport verify_qwen3vl_text_file(const SafeTensors& f, Precision precision, Comm* comm, Device device,
                                      double tolerance, const std::string& bf16_errors) {
  nlohmann::json errors;
  if (precision == Precision::bf16 && tolerance <= 0) {
    if (bf16_errors.empty())
      fail(
          "{}: bf16 against this f64 set needs --bf16-errors FILE.json (transformers' own bf16 errors on it, e.g. "
          "tests/reference/qwen3vl-text-mini-bf16-errors.json) or --tol",
          f.path());
    const std::string text = read_text_file_checked(bf16_errors, "bf16 error file");
    try {
      errors = parse_json_bounded(text, bf16_errors).at("bf16");
    } catch (const std::exception& e) {
      fail("{}: expected {{\"bf16\": {{\"<case>.<output>\": rel_l2}}}} ({})", bf16_errors, e.what());
    }
  }
  // 1.5x the reference's own bf16 error on `name`, or the fixed bounds.
  auto bound = [&](const std::string& name, double fixed) {
    if (errors.is_null()) return fixed;
    if (!errors.contains(name) || !errors[name].is_number())
      fail("{}: no bf16 error for '{}'; regenerate it with scripts/device/make_qwen3vl_text_golden.py", bf16_errors,
           name);
    return 1.5 * errors[name].get<double>();
  };
  const Qwen3VlTextConfig cfg = detect_qwen3vl_text_config(f);
  const bool root = !comm || comm->rank() == 0;
  const bool distributed = comm && comm->size() > 1;
  if (root) spdlog::info("{}: {}", f.path(), cfg.summary());
  const Qwen3VlTextWeights weights = Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f));
  const Qwen3VlTextModel model(weights, cfg, -1, Qwen3VlTextOptions{precision, device, distributed ? comm : nullptr});
  // The 1-rank rerun (rank 0 only, no communicator).
  std::unique_ptr<Qwen3VlTextModel> single;
  if (distributed && root)
    single = std::make_unique<Qwen3VlTextModel>(weights, cfg, -1, Qwen3VlTextOptions{precision, device, nullptr});
  const double tol = tolerance > 0 ? tolerance : precision == Precision::f64 ? 1e-6 : 1e-5;
  const double tol_ranks = 1e-6;
  VerifyReport rep;
  for (const auto& c : qwen3vl_text_cases(f)) {
    const Tensor ids_t = f.get(c + ".input_ids");
    std::vector<int32_t> ids(static_cast<size_t>(ids_t.numel()));
    for (int64_t i = 0; i < ids_t.numel(); ++i) ids[i] = static_cast<int32_t>(ids_t.get(i));
    std::vector<int64_t> keep;
    const std::string hs = c + ".hidden_states_";
    for (const auto& k : f.keys())
      if (k.starts_with(hs)) keep.push_back(std::stoll(k.substr(hs.size())));
    std::sort(keep.begin(), keep.end());
    const bool normed = f.has(c + ".last_hidden_state_normed");
    Qwen3VlTextOutputs out = model.forward(ids, keep, normed);
    Qwen3VlTextOutputs one;
    if (single) one = single->forward(ids, keep, normed);
    auto add = [&](const std::string& what, const Tensor& got, const Tensor& ref, const Tensor* got_one) {
      rep.add(c + " " + what, got.cpu(), ref, bound(c + "." + what, tol));
      if (got_one) rep.add(c + " " + what + " vs 1 rank", got.cpu(), got_one->cpu(), tol_ranks);
    };
    for (int64_t k : keep)
      add("hidden_states_" + std::to_string(k), out.hidden_states.at(k), f.get(hs + std::to_string(k)),
          single ? &one.hidden_states.at(k) : nullptr);
    if (normed)
      add("last_hidden_state_normed", out.last_normed, f.get(c + ".last_hidden_state_normed"),
          single ? &one.last_normed : nullptr);
  }
  return rep;
}

bool looks_like_qwen3vl_text_procedural_reference(const SafeTensors& f) {
  return f.meta("format") == "qwen3vl-text-procedural/1";
}

VerifyReport verify_qwen3vl_text_procedural(const SafeTensors& f, Precision precision, Comm* comm, Device device,
                                            double tolerance) {
  using json = nlohmann::json;
  Qwen3VlTextConfig cfg = Qwen3VlTextConfig::from_json_text(f.meta("config"), f.path());
  json weights, errors;
  std::vector<int64_t> keep;
  try {
    weights = parse_json_bounded(f.meta("weights"), "weights", kJsonMaxDepth, false);
    errors = parse_json_bounded(f.meta("reference_rel_l2_vs_f64"), "reference_rel_l2_vs_f64", kJsonMaxDepth, false);
    keep = parse_json_bounded(f.meta("states"), "states", kJsonMaxDepth, false).get<std::vector<int64_t>>();
  } catch (const std::exception& e) {
    fail(
        "{}: unreadable weights/states/reference_rel_l2_vs_f64 metadata ({}); regenerate it with "
        "scripts/device/make_qwen3vl_text_golden.py",
        f.path(), e.what());
  }
  const uint64_t seed = weights.at("seed").get<uint64_t>();
  const bool root = !comm || comm->rank() == 0;
  const bool distributed = comm && comm->size() > 1;
  if (root) spdlog::info("{}: {}, procedural weights seed {}", f.path(), cfg.summary(), seed);
  // Weights named as the engine's procedural towers name them (qwen3vl_text_parameters), which are transformers'
  // Qwen3VLTextModel keys, generated where they are loaded.
  const Qwen3VlTextWeights w = Qwen3VlTextWeights::procedural(
      qwen3vl_text_parameters(cfg), f.meta("config"), seed, fmt::format("procedural (seed {}) for {}", seed, f.path()));
  const Qwen3VlTextModel model(w, cfg, -1, Qwen3VlTextOptions{precision, device, distributed ? comm : nullptr});
  std::unique_ptr<Qwen3VlTextModel> single;
  if (distributed && root)
    single = std::make_unique<Qwen3VlTextModel>(w, cfg, -1, Qwen3VlTextOptions{precision, device, nullptr});
  VerifyReport rep;
  std::vector<std::string> cases;
  for (const auto& k : f.keys())
    if (k.ends_with(".input_ids")) cases.push_back(k.substr(0, k.size() - 10));
  std::sort(cases.begin(), cases.end());
  for (const auto& c : cases) {
    const Tensor ids_t = f.get(c + ".input_ids"), pos_t = f.get(c + ".position_ids");
    std::vector<int32_t> ids(static_cast<size_t>(ids_t.numel()));
    for (int64_t i = 0; i < ids_t.numel(); ++i) ids[i] = static_cast<int32_t>(ids_t.get(i));
    std::vector<int64_t> pos(static_cast<size_t>(pos_t.numel()));
    for (int64_t i = 0; i < pos_t.numel(); ++i) pos[i] = static_cast<int64_t>(pos_t.get(i));
    const Qwen3VlTextOutputs out = model.forward(ids, keep, false, &pos);
    Qwen3VlTextOutputs one;
    if (single) one = single->forward(ids, keep, false, &pos);
    for (int64_t k : keep) {
      const std::string name = fmt::format("{}.hidden_states.{}", c, k);
      double tol = precision == Precision::f64 ? 1e-6 : 1e-5;
      if (precision == Precision::bf16) {
        if (!errors.contains("bf16") || !errors["bf16"].contains(name))
          fail("{}: no transformers bf16 error for {} in reference_rel_l2_vs_f64", f.path(), name);
        tol = 1.5 * errors["bf16"][name].get<double>();
      }
      if (tolerance > 0) tol = tolerance;
      const Tensor got = out.hidden_states.at(k).cpu().to(DType::f64);
      rep.add(name, got, f.get(c + ".output.f64.hidden_states." + std::to_string(k)).to(DType::f64), tol);
      if (single) rep.add(name + " vs 1 rank", got, one.hidden_states.at(k).cpu().to(DType::f64), 1e-6);
    }
  }
  return rep;
}

VerifyReport verify_tokenizer_cases(const std::string& cases_json, const std::string& tokenizer_json) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_json);
  // (the bounded parser's refusal already names the file and says what is wrong)
  const nlohmann::json j =
      parse_json_bounded(read_text_file_checked(cases_json, "tokenizer cases file"), cases_json + ": tokenizer cases");
  if (!j.is_object() || !j.contains("cases") || !j["cases"].is_array())
    fail("{}: no \"cases\" list; expected {{\"cases\": [{{\"text\", \"ids\"}}]}}", cases_json);
  VerifyReport rep;
  size_t i = 0;
  for (const auto& c : j["cases"]) {
    if (!c.is_object() || !c.contains("text") || !c["text"].is_string() || !c.contains("ids") || !c["ids"].is_array())
      fail("{}: case {} lacks a \"text\" string or an \"ids\" list", cases_json, i);
    const std::string text = c["text"].get<std::string>();
    const auto want = c["ids"].get<std::vector<int32_t>>();
    const std::string label = fmt::format("case {:02} \"{}\"", i, preview(text));
    std::vector<int32_t> got;
    try {
      got = tok.encode(text);
    } catch (const Error& e) {
      spdlog::error("{}: {}", label, e.what());
    }
    const bool ok = got == want;
    rep.add_exact(label, ok);
    if (!ok) spdlog::warn("{}: got {} ids, expected {}", label, got.size(), want.size());
    const bool check_decode = (c.contains("decode") && c["decode"].is_boolean() && c["decode"].get<bool>()) ||
                              (c.contains("decoded") && c["decoded"].is_string());
    if (check_decode) {
      const std::string expect = c.contains("decoded") ? c["decoded"].get<std::string>() : text;
      const bool dec_ok = tok.decode(want) == expect;
      rep.add_exact(label + " decode", dec_ok);
    }
    ++i;
  }
  return rep;
}

}  // namespace h3

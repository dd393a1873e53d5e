#include "verify/qwen3vl_text.h"

#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/compare.h"
#include "core/log.h"
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

std::string read_text_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("{}: cannot open the {}", path, what);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
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

VerifyReport verify_qwen3vl_text_file(const SafeTensors& f, Precision precision, Comm* comm, Device device) {
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
  const double tol = precision == Precision::f64 ? 1e-6 : 1e-5;
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
      Diff d = compare(got.cpu(), ref);
      rep.lines.push_back({c + " " + what, d.rel_l2, d.max_abs, tol, d.shape_ok && d.rel_l2 <= tol});
      if (!got_one) return;
      Diff r = compare(got.cpu(), got_one->cpu());
      rep.lines.push_back(
          {c + " " + what + " vs 1 rank", r.rel_l2, r.max_abs, tol_ranks, r.shape_ok && r.rel_l2 <= tol_ranks});
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

VerifyReport verify_tokenizer_cases(const std::string& cases_json, const std::string& tokenizer_json) {
  const Tokenizer tok = Tokenizer::from_file(tokenizer_json);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_text_file(cases_json, "tokenizer cases file"));
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", cases_json, e.what());
  }
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
    rep.lines.push_back({label, ok ? 0.0 : 1.0, ok ? 0.0 : 1.0, 0.0, ok});
    if (!ok) spdlog::warn("{}: got {} ids, expected {}", label, got.size(), want.size());
    const bool check_decode = (c.contains("decode") && c["decode"].is_boolean() && c["decode"].get<bool>()) ||
                              (c.contains("decoded") && c["decoded"].is_string());
    if (check_decode) {
      const std::string expect = c.contains("decoded") ? c["decoded"].get<std::string>() : text;
      const bool dec_ok = tok.decode(want) == expect;
      rep.lines.push_back({label + " decode", dec_ok ? 0.0 : 1.0, dec_ok ? 0.0 : 1.0, 0.0, dec_ok});
    }
    ++i;
  }
  return rep;
}

}  // namespace h3

// The Qwen3-VL text tower beyond plain text: the vision hook (TextExtras: replaced embedding rows, DeepStack
// additions), transformers folders with sharded safetensors + index, and the tensor-parallel parity fixture
// (a 5-KV-head model that `h3 verify --ranks N` splits raggedly; tests/CMakeLists.txt runs it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "core/compare.h"
#include "model/qwen3vl/text.h"
#include "ops/ops.h"
#include "pipeline/noise.h"
#include "support/error_of.h"
#include "support/golden.h"
#include "support/scratch_dir.h"
#include "verify/qwen3vl_text.h"

using namespace h3;
namespace fs = std::filesystem;

namespace {

std::vector<int32_t> golden_ids(const SafeTensors& f, const std::string& c) {
  Tensor t = f.get(c + ".input_ids");
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < t.numel(); ++i) ids.push_back(static_cast<int32_t>(t.get(i)));
  return ids;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  const Diff d = compare(a, b);
  return d.shape_ok && d.max_abs == 0.0;
}

using h3::test::error_of;

// Rows `rows` of x as a new tensor.
Tensor pick_rows(const Tensor& x, const std::vector<int64_t>& rows) {
  std::vector<int32_t> r(rows.begin(), rows.end());
  return ops::gather_rows(x, Tensor::from(r, {static_cast<int64_t>(r.size())}));
}

}  // namespace

TEST(Qwen3VlTextExtras, ReplacingRowsWithTheirOwnEmbeddingsOrAddingZeroDeepstackChangesNothing) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  const Qwen3VlTextModel m(f, detect_qwen3vl_text_config(f), 50, Precision::f32);
  const auto ids = golden_ids(f, "L13");
  const Qwen3VlTextOutputs plain = m.forward(ids, {0, 1, 50}, false);

  TextExtras same;
  same.rows = {4, 5, 6, 9};
  same.embeds = pick_rows(plain.hidden_states.at(0), same.rows);
  for (int k = 0; k < 3; ++k) same.deepstack.push_back(Tensor(DType::f32, {4, 32}));  // zeros
  const Qwen3VlTextOutputs got = m.forward(ids, {0, 1, 50}, false, nullptr, &same);
  for (int64_t k : {0, 1, 50}) EXPECT_TRUE(same_bits(got.hidden_states.at(k), plain.hidden_states.at(k))) << k;
}

TEST(Qwen3VlTextExtras, ReplacedEmbeddingsAndDeepstackChangeOnlyRowsFromTheFirstReplacedOne) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  const Qwen3VlTextModel m(f, detect_qwen3vl_text_config(f), 50, Precision::f32);
  const auto ids = golden_ids(f, "L13");
  const Qwen3VlTextOutputs plain = m.forward(ids, {0, 1, 2, 50}, false);
  const int64_t first = 5;

  // New embeddings at rows 5 and 8: hidden_states[0] carries them there, earlier rows never change.
  TextExtras ex;
  ex.rows = {8, first};
  ex.embeds = seeded_normal({2, 32}, 11, 0);
  const Qwen3VlTextOutputs got = m.forward(ids, {0, 50}, false, nullptr, &ex);
  EXPECT_TRUE(same_bits(pick_rows(got.hidden_states.at(0), ex.rows), ex.embeds));
  EXPECT_TRUE(same_bits(got.hidden_states.at(50).rows(0, first), plain.hidden_states.at(50).rows(0, first)));
  EXPECT_GT(compare(got.hidden_states.at(50).rows(first, 13), plain.hidden_states.at(50).rows(first, 13)).rel_l2, 1e-3);

  // DeepStack alone (embeddings untouched): hidden_states[1] is layer 0's output before the addition, as
  // transformers records it; from hidden_states[2] on, rows >= 5 carry it.
  TextExtras ds;
  ds.rows = {first, 7};
  ds.deepstack = {seeded_normal({2, 32}, 12, 0)};
  const Qwen3VlTextOutputs dsg = m.forward(ids, {1, 2, 50}, false, nullptr, &ds);
  EXPECT_TRUE(same_bits(dsg.hidden_states.at(1), plain.hidden_states.at(1)));
  for (int64_t k : {2, 50}) {
    EXPECT_TRUE(same_bits(dsg.hidden_states.at(k).rows(0, first), plain.hidden_states.at(k).rows(0, first))) << k;
    EXPECT_GT(compare(dsg.hidden_states.at(k).rows(first, first + 1), plain.hidden_states.at(k).rows(first, first + 1))
                  .rel_l2,
              1e-3)
        << k;
  }
  // Injected at the last row only: nothing else can change (causal), and that row must.
  TextExtras last;
  last.rows = {12};
  last.deepstack = {seeded_normal({1, 32}, 13, 0)};
  const Qwen3VlTextOutputs lg = m.forward(ids, {50}, false, nullptr, &last);
  EXPECT_TRUE(same_bits(lg.hidden_states.at(50).rows(0, 12), plain.hidden_states.at(50).rows(0, 12)));
  EXPECT_FALSE(same_bits(lg.hidden_states.at(50).rows(12, 13), plain.hidden_states.at(50).rows(12, 13)));
}

TEST(Qwen3VlTextExtras, BadExtrasAreRefusedWithTheReason) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  const Qwen3VlTextModel m(f, detect_qwen3vl_text_config(f), 50, Precision::f32);
  const auto ids = golden_ids(f, "L13");
  TextExtras ex;
  ex.rows = {3, 13};
  ex.embeds = Tensor(DType::f32, {2, 32});
  EXPECT_NE(error_of([&] { (void)m.forward(ids, {50}, false, nullptr, &ex); }).find("outside the 13 tokens"),
            std::string::npos);
  ex.rows = {3, 3};
  EXPECT_NE(error_of([&] { (void)m.forward(ids, {50}, false, nullptr, &ex); }).find("given twice"), std::string::npos);
  ex.rows = {3, 4};
  ex.embeds = Tensor(DType::f32, {2, 31});
  EXPECT_NE(error_of([&] { (void)m.forward(ids, {50}, false, nullptr, &ex); }).find("expected [2, 32]"),
            std::string::npos);
}

// The golden text-mini weights as a released-style folder: config.json with "text_config" (and a vision part),
// the index, two text shards and a third holding only vision-tower and lm_head tensors.
namespace {

struct Folder {
  fs::path dir;
  nlohmann::json index;
};

Folder write_folder(const SafeTensors& f, const fs::path& dir) {
  const std::string pre = "model.language_model.";
  std::vector<std::pair<std::string, Tensor>> s1, s2, s3;
  for (const auto& k : f.keys()) {
    if (!k.starts_with("weight.")) continue;
    const std::string name = pre + k.substr(7);
    const bool late = k.starts_with("weight.layers.") && std::stoi(k.substr(14)) >= 25;
    (late || k == "weight.norm.weight" ? s2 : s1).push_back({name, f.get(k)});
  }
  s3.push_back({"model.visual.blocks.0.attn.qkv.weight", seeded_normal({6, 4}, 1, 0)});
  s3.push_back({"lm_head.weight", seeded_normal({300, 32}, 2, 0)});
  Folder out{dir, {}};
  nlohmann::json map = nlohmann::json::object();
  const char* names[] = {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                         "model-00003-of-00003.safetensors"};
  int i = 0;
  for (auto* shard : {&s1, &s2, &s3}) {
    write_safetensors((dir / names[i]).string(), *shard);
    for (const auto& [k, t] : *shard) map[k] = names[i];
    ++i;
  }
  out.index = {{"metadata", {{"total_size", 0}}}, {"weight_map", map}};
  std::ofstream(dir / "model.safetensors.index.json") << out.index.dump(1);
  nlohmann::json text = f.meta("config").empty() ? nlohmann::json::object() : nlohmann::json::parse(f.meta("config"));
  nlohmann::json cfg = {{"architectures", {"Qwen3VLForConditionalGeneration"}},
                        {"text_config", text},
                        {"vision_config", {{"depth", 1}, {"hidden_size", 4}}}};
  std::ofstream(dir / "config.json") << cfg.dump(1);
  return out;
}

}  // namespace

TEST(Qwen3VlTextFolder, ShardedFolderGivesTheSameStatesAndSkipsVisionShards) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  test::ScratchDir scratch;
  write_folder(f, scratch.path());
  const Qwen3VlTextWeights w = Qwen3VlTextWeights::open(scratch.path().string());
  EXPECT_EQ(w.shard_count(), 3u);
  EXPECT_EQ(qwen3vl_text_prefix(w), "model.language_model.");
  const Qwen3VlTextConfig want = detect_qwen3vl_text_config(f), got = detect_qwen3vl_text_config(w);
  EXPECT_EQ(got.summary(), want.summary());
  const Qwen3VlTextModel folder_model(w, got, 50, Qwen3VlTextOptions{});
  EXPECT_EQ(w.shards_opened(), 2u) << "the vision / lm_head shard must not be mapped";
  const Qwen3VlTextModel file_model(f, want, 50, Precision::f32);
  const auto ids = golden_ids(f, "L40");
  EXPECT_TRUE(same_bits(folder_model.hidden_state(ids, 50), file_model.hidden_state(ids, 50)));
  EXPECT_LE(compare(folder_model.hidden_state(ids, 50), f.get("L40.hidden_states_50")).rel_l2, 1e-5);
}

TEST(Qwen3VlTextFolder, MissingShardsKeysAndIndexAreNamed) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  {
    test::ScratchDir scratch;
    write_folder(f, scratch.path());
    fs::remove(scratch.path() / "model-00002-of-00003.safetensors");
    const Qwen3VlTextWeights w = Qwen3VlTextWeights::open(scratch.path().string());
    const Qwen3VlTextConfig c = detect_qwen3vl_text_config(w);  // layer 0 lives in shard 1
    const std::string e = error_of([&] { Qwen3VlTextModel m(w, c, 50, Qwen3VlTextOptions{}); });
    EXPECT_NE(e.find("model-00002-of-00003.safetensors is missing"), std::string::npos) << e;
  }
  {
    test::ScratchDir scratch;
    Folder d = write_folder(f, scratch.path());
    d.index["weight_map"].erase("model.language_model.layers.7.mlp.down_proj.weight");
    std::ofstream(scratch.path() / "model.safetensors.index.json") << d.index.dump();
    const Qwen3VlTextWeights w = Qwen3VlTextWeights::open(scratch.path().string());
    const std::string e =
        error_of([&] { Qwen3VlTextModel m(w, detect_qwen3vl_text_config(w), 50, Qwen3VlTextOptions{}); });
    EXPECT_NE(e.find("missing model.language_model.layers.7.mlp.down_proj.weight"), std::string::npos) << e;
  }
  {
    // Without the index the shards still say which key lives where (no key in two files): the same tensors.
    test::ScratchDir scratch;
    write_folder(f, scratch.path());
    fs::remove(scratch.path() / "model.safetensors.index.json");
    const Qwen3VlTextWeights w = Qwen3VlTextWeights::open(scratch.path().string());
    EXPECT_EQ(w.shard_count(), 3u);
    size_t stored = 2;  // the vision tensor and lm_head
    for (const auto& k : f.keys()) stored += k.starts_with("weight.");
    EXPECT_EQ(w.keys().size(), stored);
    EXPECT_TRUE(same_bits(w.get("model.language_model.layers.7.mlp.down_proj.weight"),
                          f.get("weight.layers.7.mlp.down_proj.weight")));
    // A key in two files is ambiguous without an index: refused naming both.
    fs::copy_file(scratch.path() / "model-00002-of-00003.safetensors", scratch.path() / "copy.safetensors");
    const std::string e = error_of([&] { (void)Qwen3VlTextWeights::open(scratch.path().string()); });
    EXPECT_NE(e.find("must not repeat keys"), std::string::npos) << e;
    EXPECT_NE(e.find("copy.safetensors"), std::string::npos) << e;
  }
}

// Writes the tensor-parallel parity fixture to $H3_TEXT_OUT (a scratch folder otherwise): a text decoder with
// 5 KV heads x 2 query heads (so 2, 3 and 4 ranks split the units raggedly: 3+2, 2+2+1, 2+1+1+1, and 6 ranks
// leave one rank without weights), FFN 47 (ragged chunks), random weights, and as its "reference" outputs the
// engine's own 1-rank run: `h3 verify FILE --ranks N` then checks the N-rank tower against 1 rank, not against
// transformers (qwen3vl-text-mini is that check).
TEST(Qwen3VlTextFixtures, WriteParityFile) {
  test::ScratchDir scratch;
  const char* env = std::getenv("H3_TEXT_OUT");
  const fs::path out = env ? fs::path(env) : scratch.path();
  fs::create_directories(out);
  const int64_t V = 61, H = 36, heads = 10, kv = 5, D = 6, F = 47, L = 3;
  std::vector<std::pair<std::string, Tensor>> ts;
  uint64_t seed = 100;
  auto add = [&](const std::string& k, Shape s, double scale, double offset = 0) {
    Tensor t = seeded_normal(s, seed++, 0);
    for (auto& x : t.span<float>()) x = static_cast<float>(offset + x * scale);
    ts.push_back({"weight." + k, t});
  };
  add("embed_tokens.weight", {V, H}, 1.0);
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    add(p + "input_layernorm.weight", {H}, 0.1, 1.0);
    add(p + "post_attention_layernorm.weight", {H}, 0.1, 1.0);
    add(p + "self_attn.q_norm.weight", {D}, 0.1, 1.0);
    add(p + "self_attn.k_norm.weight", {D}, 0.1, 1.0);
    add(p + "self_attn.q_proj.weight", {heads * D, H}, 0.2);
    add(p + "self_attn.k_proj.weight", {kv * D, H}, 0.2);
    add(p + "self_attn.v_proj.weight", {kv * D, H}, 0.2);
    add(p + "self_attn.o_proj.weight", {H, heads * D}, 0.1);
    add(p + "mlp.gate_proj.weight", {F, H}, 0.2);
    add(p + "mlp.up_proj.weight", {F, H}, 0.2);
    add(p + "mlp.down_proj.weight", {H, F}, 0.1);
  }
  add("norm.weight", {H}, 0.1, 1.0);
  const nlohmann::json cfg = {
      {"rms_norm_eps", 1e-6},
      {"rope_parameters", {{"rope_theta", 5e6}, {"mrope_section", {1, 1, 1}}, {"mrope_interleaved", true}}}};
  const std::map<std::string, std::string> md = {
      {"config", cfg.dump()}, {"reference", "h3 1-rank run (tensor-parallel parity fixture, not a golden)"}};
  const fs::path weights_only = out / "qwen-text-parity-weights.safetensors";
  write_safetensors(weights_only.string(), ts, md);
  SafeTensors wf = SafeTensors::open(weights_only.string());
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(wf);
  ASSERT_EQ(c.n_kv_heads, kv);
  ASSERT_EQ(c.n_layers, L);
  const Qwen3VlTextModel m(wf, c, -1, Precision::f32);
  for (int64_t n : {1, 9, 17}) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < n; ++i) ids.push_back(static_cast<int32_t>((i * 23 + n) % V));
    const Qwen3VlTextOutputs o = m.forward(ids, {1, 3}, true);
    const std::string cs = fmt::format("L{}", n);
    ts.push_back({cs + ".input_ids", Tensor::from(std::vector<int64_t>(ids.begin(), ids.end()), {n})});
    ts.push_back({cs + ".hidden_states_1", o.hidden_states.at(1)});
    ts.push_back({cs + ".hidden_states_3", o.hidden_states.at(3)});
    ts.push_back({cs + ".last_hidden_state_normed", o.last_normed});
  }
  const fs::path file = out / "qwen-text-parity.safetensors";
  write_safetensors(file.string(), ts, md);
  SafeTensors pf = SafeTensors::open(file.string());
  ASSERT_TRUE(looks_like_qwen3vl_text_golden(pf));
  const VerifyReport r = verify_qwen3vl_text_file(pf, Precision::f32);
  EXPECT_TRUE(r.pass());
  EXPECT_EQ(r.lines.size(), 9u);
}

// The Qwen3-VL text decoder against transformers' outputs in shared/golden (f32 and f64), its causality, and
// the grouped-query attention against the op API's full attention.
#include <gtest/gtest.h>

#include <random>

#include "core/compare.h"
#include "model/qwen3vl/text.h"
#include "ops/ops.h"
#include "support/golden.h"
#include "verify/qwen3vl_text.h"

using namespace h3;

namespace {

double worst(const VerifyReport& r) {
  double w = 0;
  for (const auto& l : r.lines) w = std::max(w, l.rel_l2);
  return w;
}

std::vector<int32_t> golden_ids(const SafeTensors& f, const std::string& c) {
  Tensor t = f.get(c + ".input_ids");
  std::vector<int32_t> ids;
  for (int64_t i = 0; i < t.numel(); ++i) ids.push_back(static_cast<int32_t>(t.get(i)));
  return ids;
}

Tensor random_tensor(DType dt, Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  Tensor t(DType::f64, std::move(s));
  for (auto& v : t.span<double>()) v = u(rng);
  return t.to(dt);
}

}  // namespace

TEST(Qwen3VlText, GoldenF32AllLengthsWithinTolerance) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  ASSERT_TRUE(looks_like_qwen3vl_text_golden(f));
  VerifyReport r = verify_qwen3vl_text_file(f, Precision::f32);
  r.print(stdout);
  ASSERT_EQ(r.lines.size(), 9u);  // 3 lengths x (hidden_states_1, hidden_states_50, normed last state)
  EXPECT_TRUE(r.pass());
  EXPECT_LE(worst(r), 1e-5);
}

TEST(Qwen3VlText, GoldenF64AllLengthsAtTheF32WeightFloor) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  VerifyReport r = verify_qwen3vl_text_file(f, Precision::f64);
  r.print(stdout);
  ASSERT_EQ(r.lines.size(), 9u);
  EXPECT_TRUE(r.pass());
  // The file's weights and outputs are f32-rounded (the reference ran in f64 on the unrounded weights), a
  // floor of ~3e-7 that no engine can go below; f64 must sit at that floor.
  EXPECT_LE(worst(r), 5e-7);
}

TEST(Qwen3VlText, DetectsTheGoldenConfig) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  Qwen3VlTextConfig c = detect_qwen3vl_text_config(f);
  EXPECT_EQ(c.n_layers, 51);
  EXPECT_EQ(c.hidden, 32);
  EXPECT_EQ(c.n_heads, 4);
  EXPECT_EQ(c.n_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 8);
  EXPECT_EQ(c.mrope_section, (std::array<int64_t, 3>{1, 1, 2}));
  EXPECT_TRUE(c.mrope_interleaved);
  EXPECT_EQ(c.rope_theta, 5e6);
}

TEST(Qwen3VlText, FiftyLayersGiveTheConditioningAndStateZeroIsTheEmbedding) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  Qwen3VlTextConfig c = detect_qwen3vl_text_config(f);
  Qwen3VlTextModel m50(f, c, 50, Precision::f32);
  EXPECT_EQ(m50.layers_loaded(), 50);
  const auto ids = golden_ids(f, "L13");
  EXPECT_LE(compare(m50.hidden_state(ids, 50), f.get("L13.hidden_states_50")).rel_l2, 1e-5);
  EXPECT_THROW((void)m50.forward(ids, {51}, false), Error);
  EXPECT_THROW((void)m50.forward(ids, {}, true), Error);  // the normed state needs every layer
  Tensor e = m50.hidden_state(ids, 0);
  Tensor table = f.get("weight.embed_tokens.weight");
  for (int64_t i = 0; i < e.dim(0); ++i)
    for (int64_t j = 0; j < e.dim(1); ++j) EXPECT_EQ(e.get(i * 32 + j), table.get(ids[i] * 32 + j));
  EXPECT_THROW((void)m50.hidden_state({300}, 1), Error);  // outside the vocabulary
}

TEST(Qwen3VlText, CausalEarlierRowsIgnoreLaterTokens) {
  H3_OPEN_GOLDEN(f, "qwen3vl-text-mini.safetensors");
  Qwen3VlTextModel m(f, detect_qwen3vl_text_config(f), 50, Precision::f64);
  const auto a = golden_ids(f, "L40");
  auto b = a;
  const int64_t cut = 17;
  for (size_t i = cut + 1; i < b.size(); ++i) b[i] = (b[i] + 7) % 300;
  Tensor ha = m.hidden_state(a, 50), hb = m.hidden_state(b, 50);
  EXPECT_LE(compare(ha.rows(0, cut + 1), hb.rows(0, cut + 1)).rel_l2, 1e-14);
  EXPECT_GT(compare(ha.rows(cut + 1, 40), hb.rows(cut + 1, 40)).rel_l2, 1e-3);  // later rows do change
  // A truncated prompt gives the same prefix rows.
  std::vector<int32_t> prefix(a.begin(), a.begin() + cut + 1);
  EXPECT_LE(compare(m.hidden_state(prefix, 50), ha.rows(0, cut + 1)).rel_l2, 1e-12);
}

TEST(Qwen3VlText, GqaLastRowMatchesFullAttentionWithRepeatedKvHeads) {
  for (DType dt : {DType::f32, DType::f64}) {
    const int64_t n = 23, hq = 6, hkv = 2, d = 5;
    Tensor q = random_tensor(dt, {n, hq * d}, 1), k = random_tensor(dt, {n, hkv * d}, 2),
           v = random_tensor(dt, {n, hkv * d}, 3);
    Tensor out = ops::attention_causal(q, k, v, d);
    // Repeat every KV head for its 3 query heads, then full attention: the last row sees every key either
    // way.
    Tensor k_rep(dt, {n, hq * d}), v_rep(dt, {n, hq * d});
    for (int64_t i = 0; i < n; ++i)
      for (int64_t h = 0; h < hq; ++h)
        for (int64_t c = 0; c < d; ++c) {
          const int64_t src = i * hkv * d + (h / 3) * d + c, dst = i * hq * d + h * d + c;
          if (dt == DType::f32) {
            k_rep.data<float>()[dst] = k.data<float>()[src];
            v_rep.data<float>()[dst] = v.data<float>()[src];
          } else {
            k_rep.data<double>()[dst] = k.data<double>()[src];
            v_rep.data<double>()[dst] = v.data<double>()[src];
          }
        }
    Tensor full = ops::attention(q, k_rep, v_rep, d);
    EXPECT_LE(compare(out.rows(n - 1, n), full.rows(n - 1, n)).rel_l2, dt == DType::f32 ? 1e-6 : 1e-14);
    // Row 0 attends to key 0 only: its output is v row 0 of the KV head.
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t c = 0; c < d; ++c) EXPECT_NEAR(out.get(h * d + c), v.get((h / 3) * d + c), 1e-6);
  }
}

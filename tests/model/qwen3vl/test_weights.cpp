// Where the Qwen3-VL towers' weights come from (model/qwen3vl/weights.h, procedural.h): block loads of stored and
// procedural tensors, procedural:mini / procedural:full specs, and the precisions each device runs.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "core/compare.h"
#include "core/error.h"
#include "io/procedural.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/vision.h"
#include "model/qwen3vl/weights.h"
#include "ops/ops.h"
#include "support/bitwise.h"
#include "support/error_of.h"

namespace h3 {
namespace {

using test::error_of;

using test::same_bits;

TEST(QwenWeights, BlocksOfStoredAndProceduralTensorsAreTheSliceOfTheWhole) {
  const Qwen3VlTextWeights file = Qwen3VlTextWeights::from_file(procedural_qwen3vl_text_file(kDefaultProceduralSeed));
  // The same parameters as a procedural source: nothing stored, generated per load.
  const Qwen3VlTextConfig c = procedural_qwen3vl_text_config();
  const Qwen3VlTextWeights proc =
      Qwen3VlTextWeights::procedural(qwen3vl_text_parameters(c), "", kDefaultProceduralSeed, "procedural test");
  ASSERT_TRUE(proc.procedural());
  ASSERT_FALSE(file.procedural());
  const std::string key = "layers.3.self_attn.o_proj.weight";  // [64, 64]
  const Tensor whole = file.get(key);
  ASSERT_EQ(whole.shape(), (Shape{c.hidden, c.n_heads * c.head_dim}));
  EXPECT_TRUE(same_bits(proc.get(key), whole)) << "procedural source == procedural file";
  for (const Qwen3VlTextWeights* w : {&file, &proc}) {
    SCOPED_TRACE(w->procedural() ? "procedural" : "file");
    EXPECT_TRUE(same_bits(w->load(key, DType::f32, Device::cpu), whole));
    EXPECT_TRUE(same_bits(w->load(key, DType::f32, Device::cpu, {5, 17}), whole.rows(5, 17).clone()));
    EXPECT_TRUE(same_bits(w->load(key, DType::f32, Device::cpu, {}, {16, 48}), ops::columns(whole, 16, 48)));
    EXPECT_TRUE(
        same_bits(w->load(key, DType::f32, Device::cpu, {2, 9}, {30, 33}), ops::columns(whole.rows(2, 9), 30, 33)));
    EXPECT_TRUE(same_bits(w->load(key, DType::f64, Device::cpu, {1, 2}), whole.rows(1, 2).to(DType::f64)));
    const Tensor norm = w->load("layers.3.input_layernorm.weight", DType::f32, Device::cpu, {3, 7});
    EXPECT_TRUE(same_bits(norm, file.get("layers.3.input_layernorm.weight").rows(3, 7).clone()));
    EXPECT_NE(error_of([&] {
                (void)w->load(key, DType::f32, Device::cpu, {0, 65});
              }).find("out of range"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                (void)w->load(key, DType::f32, Device::cpu, {}, {60, 70});
              }).find("out of range"),
              std::string::npos);
    EXPECT_NE(error_of([&] {
                (void)w->load("layers.3.input_layernorm.weight", DType::f32, Device::cpu, {}, {0, 1});
              }).find("only 2-D"),
              std::string::npos);
  }
}

TEST(QwenWeights, ProceduralSourceGivesTheSameTowerAsTheProceduralFile) {
  const Qwen3VlTextWeights file = Qwen3VlTextWeights::from_file(procedural_qwen3vl_text_file(7));
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(file);
  const Qwen3VlTextWeights proc =
      Qwen3VlTextWeights::procedural(qwen3vl_text_parameters(c), file.config_json(), 7, "proc");
  EXPECT_EQ(detect_qwen3vl_text_config(proc).summary(), c.summary());
  const Qwen3VlTextModel a(file, c, 6, Qwen3VlTextOptions{});
  const Qwen3VlTextModel b(proc, c, 6, Qwen3VlTextOptions{});
  const std::vector<int32_t> ids = {5, 77, 3, 200, 41, 9, 13};
  EXPECT_TRUE(same_bits(a.hidden_state(ids, 6), b.hidden_state(ids, 6)));
}

TEST(QwenWeights, ProceduralSpecsNameMiniOrFullWithASeed) {
  const Qwen3VlTextWeights mini = procedural_qwen3vl("procedural:mini", "--text-encoder");
  EXPECT_EQ(detect_qwen3vl_text_config(mini).hidden, 64);
  EXPECT_TRUE(same_bits(procedural_qwen3vl("procedural:mini:seed=7", "--text-encoder").get("norm.weight"),
                        Qwen3VlTextWeights::from_file(procedural_qwen3vl_text_file(7)).get("norm.weight")));
  // procedural:full describes the released towers without generating anything.
  const Qwen3VlTextWeights full = procedural_qwen3vl("procedural:full:seed=3", "--text-encoder");
  ASSERT_TRUE(full.procedural());
  const Qwen3VlTextConfig t = detect_qwen3vl_text_config(full);
  const Qwen3VlTextConfig released;
  EXPECT_EQ(t.summary(), released.summary());
  EXPECT_EQ(t.n_layers, 64);
  EXPECT_EQ(t.hidden, 5120);
  EXPECT_EQ(t.intermediate, 25600);
  EXPECT_EQ(t.vocab_size, 151936);
  ASSERT_TRUE(has_qwen3vl_vision(full));
  const Qwen3VlVisionConfig v = detect_qwen3vl_vision_config(full);
  EXPECT_EQ(v.summary(), Qwen3VlVisionConfig{}.summary());
  EXPECT_EQ(full.info("layers.49.mlp.down_proj.weight").shape, (Shape{5120, 25600}));
  // A block of a full-size tensor without the rest of it: rows 1000..1002 of the 151936 x 5120 embedding are its
  // values 1000 * 5120 ... of the formula.
  const Tensor rows = full.load("embed_tokens.weight", DType::f32, Device::cpu, {1000, 1002});
  const ProceduralRule rule = procedural_rule("embed_tokens.weight", {151936, 5120}, 3);
  const double u = static_cast<double>(splitmix64(rule.base + 1000 * 5120 + 7) >> 11) * 0x1p-53 * 2.0 - 1.0;
  EXPECT_EQ(rows.data<float>()[7], static_cast<float>(rule.offset + u * rule.scale));
  for (const char* bad : {"procedural:huge", "procedural:full:seed=x", "procedural:full:seed=-1", "/a/file"})
    EXPECT_NE(error_of([&] { (void)procedural_qwen3vl(bad, "--text-encoder"); }).find("--text-encoder"),
              std::string::npos)
        << bad;
}

TEST(QwenWeights, EachDeviceRunsItsPrecisions) {
  const Qwen3VlTextWeights w = Qwen3VlTextWeights::from_file(procedural_qwen3vl_text_file(kDefaultProceduralSeed));
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(w);
  EXPECT_NE(error_of([&] {
              Qwen3VlTextModel m(w, c, 1, Qwen3VlTextOptions{Precision::bf16, Device::cpu, nullptr});
            }).find("bf16 runs on the GPU only"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Qwen3VlTextModel m(w, c, 1, Qwen3VlTextOptions{Precision::f64, Device::cuda, nullptr});
            }).find("f64 runs on the CPU only"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              Qwen3VlTextModel m(w, c, 1, Qwen3VlTextOptions{Precision::fp8, Device::cpu, nullptr});
            }).find("fp8"),
            std::string::npos);
  const Qwen3VlVisionConfig v = detect_qwen3vl_vision_config(w);
  EXPECT_NE(error_of([&] {
              Qwen3VlVisionModel m(w, v, Qwen3VlVisionOptions{Precision::bf16, Device::cpu});
            }).find("bf16 runs on the GPU only"),
            std::string::npos);
}

}  // namespace
}  // namespace h3

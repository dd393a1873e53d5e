// The text tower on the GPU: the causal grouped-query attention op against the CPU backend on random odd shapes
// (f32 and bf16), and qwen3vl-text-mini on the GPU against the CPU run and the golden states. Without a GPU every
// test here reports itself SKIPPED, loudly.
#include <gtest/gtest.h>

#include "backend/backend.h"
#include "core/compare.h"
#include "core/dtype.h"
#include "golden.h"
#include "model/qwen3vl/text.h"
#include "ops/ops.h"
#include "ops/ops_conv.h"
#include "pipeline/synthetic.h"

#include "gpu_test.h"

namespace h3 {
namespace {

using test::gpu_ready;

// Random f32 values with bf16-exact magnitudes, so both backends start from identical inputs.
Tensor rnd(Shape s, uint64_t seed) {
  return test::bf16_exact_normal(s, seed, 9);
}

TEST(CudaText, AttentionCausalMatchesCpuOnOddShapesWithGroupedHeads) {
  H3_REQUIRE_GPU();
  struct Case {
    int64_t n, heads, kv_heads, d;
  };
  const Case cases[] = {{1, 3, 1, 7}, {23, 6, 2, 5}, {37, 5, 5, 33}, {70, 8, 1, 128}, {19, 4, 2, 200}};
  for (const Case& c : cases) {
    SCOPED_TRACE(testing::Message() << "n " << c.n << " heads " << c.heads << "/" << c.kv_heads << " d " << c.d);
    const Tensor q = rnd({c.n, c.heads * c.d}, 1), k = rnd({c.n, c.kv_heads * c.d}, 2),
                 v = rnd({c.n, c.kv_heads * c.d}, 3);
    const Tensor want = ops::attention_causal(q, k, v, c.d);
    for (DType dt : {DType::f32, DType::bf16}) {
      const Tensor got = ops::attention_causal(q.to_device(Device::cuda).to(dt), k.to_device(Device::cuda).to(dt),
                                               v.to_device(Device::cuda).to(dt), c.d);
      ASSERT_TRUE(got.on_device());
      const Diff d = compare(got.cpu().to(DType::f32), want);
      EXPECT_TRUE(d.shape_ok);
      EXPECT_LE(d.rel_l2, dt == DType::f32 ? 1e-6 : 5e-3) << dtype_name(dt) << " max abs " << d.max_abs;
    }
  }
}

TEST(CudaText, TextMiniOnTheGpuMatchesTheCpuAndTheGolden) {
  H3_REQUIRE_GPU();
  const auto file = test::golden("qwen3vl-text-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  SafeTensors f = SafeTensors::open(file);
  const Qwen3VlTextConfig c = detect_qwen3vl_text_config(f);
  const Qwen3VlTextWeights w = Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f));
  const Qwen3VlTextModel cpu(w, c, -1, Qwen3VlTextOptions{Precision::f32, Device::cpu, nullptr});
  const Qwen3VlTextModel gpu(w, c, -1, Qwen3VlTextOptions{Precision::f32, Device::cuda, nullptr});
  EXPECT_EQ(gpu.bytes_replicated() + gpu.bytes_sharded(), cpu.bytes_replicated() + cpu.bytes_sharded());
  for (const char* cs : {"L1", "L13", "L40"}) {
    SCOPED_TRACE(cs);
    const Tensor ids_t = f.get(std::string(cs) + ".input_ids");
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < ids_t.numel(); ++i) ids.push_back(static_cast<int32_t>(ids_t.get(i)));
    const Qwen3VlTextOutputs g = gpu.forward(ids, {1, 50}, true), h = cpu.forward(ids, {1, 50}, true);
    ASSERT_TRUE(g.hidden_states.at(50).on_device());
    for (int64_t k : {1, 50}) {
      EXPECT_LE(compare(g.hidden_states.at(k).cpu(), h.hidden_states.at(k)).rel_l2, 2e-6) << k;
      EXPECT_LE(
          compare(g.hidden_states.at(k).cpu(), f.get(std::string(cs) + ".hidden_states_" + std::to_string(k))).rel_l2,
          1e-5)
          << k;
    }
    EXPECT_LE(compare(g.last_normed.cpu(), f.get(std::string(cs) + ".last_hidden_state_normed")).rel_l2, 1e-5);
    // The vision hook on the GPU: rows replaced by their own embeddings and zero DeepStack change nothing.
    if (ids.size() > 4) {
      TextExtras ex;
      ex.rows = {1, 3};
      ex.embeds = ops::gather_rows(
          h.hidden_states.count(0) ? h.hidden_states.at(0) : cpu.forward(ids, {0}, false).hidden_states.at(0),
          Tensor::from(std::vector<int32_t>{1, 3}, {2}));
      ex.deepstack = {Tensor(DType::f32, {2, c.hidden})};
      const Qwen3VlTextOutputs e = gpu.forward(ids, {50}, false, nullptr, &ex);
      EXPECT_EQ(compare(e.hidden_states.at(50).cpu(), g.hidden_states.at(50).cpu()).max_abs, 0.0);
    }
  }
}

}  // namespace
}  // namespace h3

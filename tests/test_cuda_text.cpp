// The text tower on the GPU (its causal grouped-query attention op against the CPU: test_backend_ops.cpp):
// qwen3vl-text-mini on the GPU against the CPU run and the golden states. Without a GPU every
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

// DiT weight streaming (DitStreaming, model/dit/streaming.h) on the CPU backend with the procedural mini DiT: any
// number of resident blocks and any ring size give bitwise the resident model's outputs (memcmp), over several
// forwards (the ring's cyclic prefetch across forwards) and with every block's activations kept.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "model/dit/dit.h"
#include "pipeline/synthetic.h"
#include "support/bitwise.h"
#include "support/error_of.h"

using namespace h3;

namespace {

DitCheckpoint mini() {
  return DitCheckpoint::open("procedural:mini");
}

using test::expect_same_outputs;
using test::two_forwards;
const auto bitwise = test::same_bits;

}  // namespace

TEST(DitStreaming, EveryResidentCountIsBitwiseTheResidentRun) {
  const DitCheckpoint ck = mini();
  const int n = ck.config().num_layers;
  ASSERT_GE(n, 3);
  for (const Precision p : {Precision::f32, Precision::bf16}) {
    const DitModel resident(ck, p);
    EXPECT_EQ(resident.resident_blocks(), n);
    EXPECT_EQ(resident.streaming_stats().streamed, 0);
    const std::vector<DitOutputs> want = two_forwards(resident);
    ASSERT_FALSE(bitwise(want[0].video, want[1].video)) << "the two forwards must differ to test the second";
    for (const int r : {0, 1, n - 1}) {
      for (const int slots : {1, 2, 3}) {
        const DitModel streamed(ck, p, DistPlan::single(), Device::cpu, {}, DitStreaming{r, slots});
        EXPECT_EQ(streamed.resident_blocks(), r);
        expect_same_outputs(two_forwards(streamed), want,
                            std::string(precision_name(p)) + ", " + std::to_string(r) + " resident, " +
                                std::to_string(slots) + " slots");
        const LayerStreamStats st = streamed.streaming_stats();
        EXPECT_EQ(st.streamed, n - r);
        EXPECT_EQ(st.misses, 0) << "forwards acquire the blocks in order";
        EXPECT_GE(st.copies, n - r) << "every streamed block was copied";
        EXPECT_GT(st.parked_bytes, 0u);
      }
    }
  }
}

TEST(DitStreaming, KeptActivationsAreBitwiseToo) {
  const DitCheckpoint ck = mini();
  const std::vector<DitOutputs> want = two_forwards(DitModel(ck, Precision::bf16), true);
  const std::vector<DitOutputs> got =
      two_forwards(DitModel(ck, Precision::bf16, DistPlan::single(), Device::cpu, {}, DitStreaming{1, 2}), true);
  ASSERT_EQ(got[1].activations.size(), want[1].activations.size());
  for (const auto& [name, t] : want[1].activations) EXPECT_TRUE(bitwise(got[1].activations.at(name), t)) << name;
}

TEST(DitStreaming, AllOrMoreResidentIsNoStreamingAndBadCountsAreRefused) {
  const DitCheckpoint ck = mini();
  const int n = ck.config().num_layers;
  const DitModel all(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, DitStreaming{n + 4, 3});
  EXPECT_EQ(all.resident_blocks(), n);
  EXPECT_EQ(all.streaming_stats().streamed, 0);
  const std::string e = h3::test::error_of([&] {
    DitModel bad(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, DitStreaming{-2, 3});
  });
  EXPECT_NE(e.find("DiT streaming: -2 resident blocks asked for"), std::string::npos) << e;
  const std::string s = h3::test::error_of([&] {
    DitModel bad(ck, Precision::f32, DistPlan::single(), Device::cpu, {}, DitStreaming{1, 0});
  });
  EXPECT_NE(s.find("a ring of 0 slots"), std::string::npos) << s;
}

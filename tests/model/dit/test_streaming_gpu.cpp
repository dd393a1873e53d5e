// DiT weight streaming on the GPU (skipped loudly without one): the ring fed on the transfer stream, ordered by
// events, gives bitwise the resident model's outputs in bf16 and FP8 (FP8 weights travel as FP8), over two forwards
// and rings of one and two slots (a one-slot ring refills the slot the compute stream just used).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/dit/dit.h"
#include "pipeline/synthetic.h"
#include "support/bitwise.h"
#include "support/gpu_test.h"

namespace h3 {

namespace {

using test::expect_same_outputs;
using test::two_forwards;

}  // namespace

TEST(CudaDitStreaming, StreamedBlocksAreBitwiseTheResidentRun) {
  H3_REQUIRE_GPU();
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  const int n = ck.config().num_layers;
  for (const Precision p : {Precision::bf16, Precision::fp8}) {
    const std::vector<DitOutputs> want = two_forwards(DitModel(ck, p, DistPlan::single(), Device::cuda));
    for (const int r : {0, 1, n - 1})
      for (const int slots : {1, 2}) {
        const DitModel m(ck, p, DistPlan::single(), Device::cuda, {}, DitStreaming{r, slots});
        expect_same_outputs(two_forwards(m), want,
                            std::string(precision_name(p)) + ", " + std::to_string(r) + " resident, " +
                                std::to_string(slots) + " slots");
        EXPECT_EQ(m.streaming_stats().streamed, n - r);
        EXPECT_EQ(m.streaming_stats().misses, 0);
      }
  }
}

}  // namespace h3

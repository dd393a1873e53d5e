// DiT weight streaming on the GPU (skipped loudly without one): the ring fed on the transfer stream, ordered by
// events, gives bitwise the resident model's outputs in bf16 and FP8 (FP8 weights travel as FP8), over two forwards
// and rings of one and two slots (a one-slot ring refills the slot the compute stream just used).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "model/dit/dit.h"
#include "pipeline/synthetic.h"
#include "support/gpu_test.h"

namespace h3 {

namespace {

bool bitwise(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

std::vector<DitOutputs> two_forwards(const DitModel& m) {
  DitInputs in = make_synthetic_inputs(m.config(), SyntheticRequest{});
  std::vector<DitOutputs> out;
  out.push_back(m.forward(in));
  in.timestep =
      Tensor::from(std::vector<float>(static_cast<size_t>(in.timestep.numel()), 0.375f), {in.timestep.numel()});
  out.push_back(m.forward(in));
  return out;
}

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
        const std::vector<DitOutputs> got = two_forwards(m);
        for (size_t f = 0; f < got.size(); ++f) {
          const std::string what = std::string(precision_name(p)) + ", " + std::to_string(r) + " resident, " +
                                   std::to_string(slots) + " slots, forward " + std::to_string(f);
          EXPECT_TRUE(bitwise(got[f].video, want[f].video)) << what;
          EXPECT_TRUE(bitwise(got[f].audio, want[f].audio)) << what;
        }
        EXPECT_EQ(m.streaming_stats().streamed, n - r);
        EXPECT_EQ(m.streaming_stats().misses, 0);
      }
  }
}

}  // namespace h3

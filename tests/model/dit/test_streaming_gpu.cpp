// DiT weight streaming on the GPU (skipped loudly without one): the ring fed on the transfer stream, ordered by
// events, gives bitwise the resident model's outputs in bf16 and FP8 (FP8 weights travel as FP8), over two forwards
// and rings of one and two slots (a one-slot ring refills the slot the compute stream just used); the same with the
// blocks read from the checkpoint at each copy through the page-locked staging ring (the mapped source): FP8 from an
// FP8 file, bf16 from a bf16 file.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/dit/dit.h"
#include "model/dit/export.h"
#include "pipeline/synthetic.h"
#include "support/bitwise.h"
#include "support/error_of.h"
#include "support/gpu_test.h"
#include "support/scratch_dir.h"

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

// The mapped source on the GPU: an FP8 run from the file `h3 convert --quant fp8 --dtype bf16` writes (FP8 e4m3 GEMM
// weights with their per-tensor scales, bf16 AdaLN), a bf16 run from a bf16 file; the resident model loaded from
// the same file is the reference. A bf16 file for an FP8 run is refused, naming the tensor.
TEST(CudaDitStreaming, BlocksReadFromTheFileAreBitwiseTheResidentRun) {
  H3_REQUIRE_GPU();
  const test::ScratchDir dir;
  auto write = [&](QuantFormat q, const std::string& name) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> meta;
    export_dit(DitCheckpoint::open("procedural:mini"), DType::bf16, ExportLayout::diffusers, q, tensors, meta);
    write_safetensors(dir / name, tensors, meta);
    return (dir / name).string();
  };
  const std::string fp8_file = write(QuantFormat::fp8, "fp8.safetensors"),
                    bf16_file = write(QuantFormat::none, "bf16.safetensors");
  for (const auto& [p, path] : {std::pair{Precision::fp8, fp8_file}, std::pair{Precision::bf16, bf16_file}}) {
    const DitCheckpoint ck = DitCheckpoint::open(path);
    const int n = ck.config().num_layers;
    const std::vector<DitOutputs> want = two_forwards(DitModel(ck, p, DistPlan::single(), Device::cuda));
    for (const int r : {0, 1})
      for (const int slots : {1, 2}) {
        const DitModel m(ck, p, DistPlan::single(), Device::cuda, {},
                         DitStreaming{r, slots, ParkSource::mapped, HostMemory{}});
        const std::vector<DitOutputs> got = two_forwards(m);
        for (size_t f = 0; f < got.size(); ++f) {
          const std::string what = std::string(precision_name(p)) + " from its file, " + std::to_string(r) +
                                   " resident, " + std::to_string(slots) + " slots, forward " + std::to_string(f);
          EXPECT_TRUE(test::same_bits(got[f].video, want[f].video)) << what;
          EXPECT_TRUE(test::same_bits(got[f].audio, want[f].audio)) << what;
        }
        const LayerStreamStats st = m.streaming_stats();
        EXPECT_EQ(st.streamed, n - r);
        EXPECT_EQ(st.parked_bytes, 0u);
        EXPECT_GT(st.mapped_bytes, 0u);
      }
  }
  const std::string e = test::error_of([&] {
    DitModel m(DitCheckpoint::open(bf16_file), Precision::fp8, DistPlan::single(), Device::cuda, {},
               DitStreaming{1, 2, ParkSource::mapped, HostMemory{}});
  });
  EXPECT_NE(e.find("is stored bf16, an FP8 run holds FP8 e4m3 with a per-tensor scale"), std::string::npos) << e;
}

}  // namespace h3

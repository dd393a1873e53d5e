// The rule that keeps a DiT block GEMM in bf16 when an FP8 GEMM cannot take its weight (model/dit/fp8_layers.h): on
// the CPU for the released widths, the mini model, a hidden-72 model and tensor-parallel slices (expected shapes
// worked out by hand from the partition rule), and on the GPU a hidden-72 model in FP8 against the CPU's f32 forward
// (skipped loudly without a GPU).
#include <gtest/gtest.h>

#include <cstdio>
#include <tuple>

#include "core/compare.h"
#include "io/procedural.h"
#include "model/dit/checkpoint.h"
#include "model/dit/dit.h"
#include "model/dit/fp8_layers.h"
#include "pipeline/synthetic.h"
#include "support/gpu_test.h"

namespace h3 {
namespace {

DitConfig hidden72() {
  DitConfig c = *DitConfig::named("mini");  // 14 heads x 32 (inner 448), ffn 160
  c.hidden_size = 72;
  return c;
}

}  // namespace

TEST(Fp8Layers, GemmShapeRule) {
  EXPECT_TRUE(fp8_gemm_takes(16, 16));
  EXPECT_TRUE(fp8_gemm_takes(21504, 5376));
  EXPECT_FALSE(fp8_gemm_takes(72, 448));
  EXPECT_FALSE(fp8_gemm_takes(448, 72));
  EXPECT_FALSE(fp8_gemm_takes(5376, 4779));
  EXPECT_FALSE(fp8_gemm_takes(0, 16));
}

TEST(Fp8Layers, ReleasedWidthsAreAllFp8OnOneRankAndOnTwoOrFourTensorRanks) {
  const DitConfig c = *DitConfig::named("full");
  for (auto [mode, K, U] : {std::tuple{DistMode::ulysses, 1, 1},
                            {DistMode::ulysses, 1, 8},
                            {DistMode::ulysses_ag, 1, 3},
                            {DistMode::tensor, 2, 1},
                            {DistMode::tensor, 4, 1},
                            {DistMode::hybrid, 2, 4}}) {
    const DitFp8Layers r = dit_fp8_layers(c, mode, K, U);
    EXPECT_TRUE(r.all_fp8()) << dist_mode_name(mode) << " K " << K << " U " << U << ": " << r.summary();
    EXPECT_TRUE(r.qkv && r.out && r.ff_in && r.ff_out);
  }
  EXPECT_EQ(dit_fp8_layers(c, DistMode::ulysses, 1, 1).summary(), "every block GEMM in FP8");
}

// ffn 14336 over 3 ranks: 4779, 4779, 4778 columns; ff_in holds 2 x 4779 = 9558 rows. Heads 56 over 3: 19, 19, 18
// (x 128 = 2432, 2432, 2304 rows), all multiples of 16.
TEST(Fp8Layers, ThreeTensorRanksKeepTheFfnInBf16) {
  const DitFp8Layers r = dit_fp8_layers(*DitConfig::named("full"), DistMode::tensor, 3, 1);
  EXPECT_TRUE(r.qkv);
  EXPECT_TRUE(r.out);
  EXPECT_FALSE(r.ff_in);
  EXPECT_FALSE(r.ff_out);
  ASSERT_EQ(r.kept_bf16.size(), 2u);
  EXPECT_EQ(r.kept_bf16[0], "ff_in [9558 x 5376]: 9558 outputs is not a multiple of 16");
  EXPECT_EQ(r.kept_bf16[1], "ff_out [5376 x 4779]: 4779 inputs is not a multiple of 16");
  EXPECT_NE(r.summary().find("FP8 except ff_in, ff_out"), std::string::npos) << r.summary();
}

TEST(Fp8Layers, MiniModel) {
  const DitConfig c = *DitConfig::named("mini");  // hidden 96, inner 448, ffn 160
  EXPECT_TRUE(dit_fp8_layers(c, DistMode::ulysses, 1, 1).all_fp8());
  // ulysses-ag over 3: 5, 5, 4 heads x 32 = 160, 160, 128 q/k/v rows.
  EXPECT_TRUE(dit_fp8_layers(c, DistMode::ulysses_ag, 1, 3).all_fp8());
  // tensor over 3: heads 5, 5, 4 (fine); ffn 160 -> 54, 53, 53 columns, ff_in 108 rows.
  const DitFp8Layers t3 = dit_fp8_layers(c, DistMode::tensor, 3, 1);
  EXPECT_TRUE(t3.qkv && t3.out);
  EXPECT_FALSE(t3.ff_in || t3.ff_out);
  EXPECT_EQ(t3.kept_bf16.at(0), "ff_in [108 x 96]: 108 outputs is not a multiple of 16");
  // hybrid K = 2: ffn 80 columns, 160 ff_in rows, 7 heads x 32 = 224.
  EXPECT_TRUE(dit_fp8_layers(c, DistMode::hybrid, 2, 2).all_fp8());
}

// The model behind "internal error ... please report this" in `h3 --device cuda verify` with FP8: every block GEMM
// has 72 as one dimension.
TEST(Fp8Layers, Hidden72KeepsEveryBlockGemmInBf16) {
  const DitFp8Layers r = dit_fp8_layers(hidden72(), DistMode::ulysses, 1, 1);
  EXPECT_FALSE(r.qkv || r.out || r.ff_in || r.ff_out);
  ASSERT_EQ(r.kept_bf16.size(), 4u);
  EXPECT_EQ(r.kept_bf16[0], "qkv [448 x 72]: 72 inputs is not a multiple of 16");
  EXPECT_EQ(r.kept_bf16[1], "out [72 x 448]: 72 outputs is not a multiple of 16");
  EXPECT_EQ(r.kept_bf16[2], "ff_in [320 x 72]: 72 inputs is not a multiple of 16");
  EXPECT_EQ(r.kept_bf16[3], "ff_out [72 x 160]: 72 outputs is not a multiple of 16");
}

// On the GPU the hidden-72 model now runs in FP8 (its GEMMs in bf16, attention in FP8 where a kernel takes the
// shape) within the FP8 recipe's tolerance of the CPU's f32 forward (4e-2, as the FP8 checkpoints' GPU tests).
TEST(Fp8Layers, Hidden72RunsInFp8OnTheGpu) {
  H3_REQUIRE_GPU();
  const DitCheckpoint ck = DitCheckpoint::procedural(hidden72(), kDefaultProceduralSeed, "hidden72");
  const DitInputs in = make_synthetic_inputs(ck.config(), SyntheticRequest{});
  const DitOutputs cpu = DitModel(ck, Precision::f32).forward(in);
  const DitModel fp8(ck, Precision::fp8, DistPlan::single(), Device::cuda);
  EXPECT_FALSE(fp8.fp8_layers().qkv || fp8.fp8_layers().ff_out);
  const DitOutputs gpu = fp8.forward(in);
  const Diff dv = compare(gpu.video, cpu.video), da = compare(gpu.audio, cpu.audio);
  std::printf("hidden 72 in FP8 on the GPU: video rel_l2 %.3e, audio %.3e vs the CPU f32 forward\n", dv.rel_l2,
              da.rel_l2);
  EXPECT_LE(dv.rel_l2, 4e-2);
  EXPECT_LE(da.rel_l2, 4e-2);
}

}  // namespace h3

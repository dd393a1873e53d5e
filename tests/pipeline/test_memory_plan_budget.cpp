// The memory plan under a device budget (pipeline/memory_plan.h) for the released shapes on the cards people have:
// 12 / 16 / 24 / 32 / 48 / 80 GiB, 480p and 768p at 124 frames, 50 steps (49 DiT calls), the DiT in bf16 and FP8, one
// rank and tensor mode over 2 and 4 ranks. What the planner chooses (resident blocks and text layers, ring slots,
// the VAE batch, streamed bytes, the expected cost) and what it refuses, with the exact message.
//
// The expected values are worked out here by hand from the configs' widths (the DiT: 50 blocks, 56 heads x 128,
// hidden 5376, FFN 14336, AdaLN 18 x 5376 x 2688; the Qwen3-VL-32B text tower: width 5120, 64 query / 8 KV heads of
// 128, MLP 25600, vocabulary 151,936, 50 layers used) and the planner's documented rules, never by calling
// the planner's size functions. The activation bounds are restated from memory_sizes.h (the bound itself is held
// against the H200's measured peaks in test_memory_plan.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "io/layer_stream.h"
#include "model/vae/video_vae.h"
#include "pipeline/memory_plan.h"
#include "support/released_geometry.h"

namespace h3 {
namespace {

// The DiT's widths.
constexpr int64_t H = 5376, I = 56 * 128, F = 14336, E = 2688, D = 128, kBlocks = 50;
// One block's parameters by kind (DitConfig::parameters): q, k, v [I, H]; out [H, I]; the MLP's [2F, H] and [H, F];
// AdaLN [18H, E] and its bias; two norms of H and the q / k norms of D.
constexpr int64_t kQkv = 3 * I * H, kOut = H * I, kFfIn = 2 * F * H, kFfOut = H * F, kAda = 18 * H * E + 18 * H;
constexpr int64_t kNorms = 2 * H + 2 * D;
static_assert(kQkv + kOut + kFfIn + kFfOut + kAda + kNorms == 645'571'840);

// One block on rank 0 of a tensor-parallel split over K (K = 1: whole): the GEMMs and AdaLN rows divided by K (every
// width here divides by 4), the norms whole. bf16: two bytes a value. FP8: the four GEMMs at one byte a value and an
// f32 scale a row of the rank's slice (q / k / v: I / K rows each; out: H; MLP in: 2F / K; MLP out: H); the rest
// bf16.
int64_t block_bytes(Precision p, int64_t K) {
  if (p == Precision::bf16) return 2 * ((kQkv + kOut + kFfIn + kFfOut + kAda) / K + kNorms);
  return (kQkv + kOut + kFfIn + kFfOut) / K + 4 * (3 * I / K + H + 2 * F / K + H) + 2 * (kAda / K + kNorms);
}
// Whole: bf16 1,291,143,680 bytes (1.20 GiB); FP8 385,351,680 GEMM bytes + 60,928 scales x 4 + 520,440,320 bf16
// bytes = 906,035,712 (0.84 GiB).
static_assert(2 * (kQkv + kOut + kFfIn + kFfOut + kAda + kNorms) == 1'291'143'680);
static_assert(kQkv + kOut + kFfIn + kFfOut + 4 * (3 * I + H + 2 * F + H) + 2 * (kAda + kNorms) == 906'035'712);

// The DiT outside its blocks, the same on every rank and in both precisions: in f32 the patch projections (in 24 x 4
// = 96 channels; audio 32), the time MLP (256 -> 5376 -> 2688) and the output heads; in bf16 the context embedder
// (5120 -> H), the two refiner blocks (a block without AdaLN), the refiner's final norm and the output norm's
// modulation [2H, E].
constexpr int64_t kBaseF32 =
    (H * 96 + H) + (H * 32 + H) + (5376 * 256 + 5376) + (2688 * 5376 + 2688) + (96 * H + 96) + (32 * H + 32);
constexpr int64_t kBaseBf16 =
    (H * 5120 + H) + 2 * (kQkv + kOut + kFfIn + kFfOut + kNorms) + H + (H + 2 * H * E + 2 * H);
constexpr int64_t kDitBase = 4 * kBaseF32 + 2 * kBaseBf16;

// The text tower's decoder layer on rank 0 of tp ranks (its KV groups: 8 / tp of them), bf16: q [8 x 128 per group,
// 5120], k and v [128, 5120] per group, o [5120, 8 x 128 per group], the MLP's gate, up and down at 25600 / 8 per
// group, two norms of 5120 and the q / k norms of 128. The embeddings 151,936 x 5120 stay whole.
constexpr int64_t kTh = 5120, kTi = 25600, kVocab = 151936, kTextLayers = 50;
int64_t text_layer_bytes(int64_t tp) {
  const int64_t groups = 8 / tp;
  return 2 * (groups * (8 * D * kTh + 2 * D * kTh + kTh * 8 * D + 3 * (kTi / 8) * kTh) + 2 * kTh + 2 * D);
}
constexpr int64_t kTextBase = 2 * kVocab * kTh;
// One layer whole: 487,598,336 values, 975,196,672 bytes (0.91 GiB).
static_assert(2 * (64 * D * kTh + 16 * D * kTh + kTh * 64 * D + 3 * kTi * kTh + 2 * kTh + 2 * D) == 975'196'672);

// memory_sizes.h's bounds, restated. The DiT: the MLP's live rows (bf16 10H + 6F_t, FP8 9H + 5F_t a projected row;
// a tensor rank projects all K x ceil(S / K) rows) or attention's (2 (4H + 3I) an own row), +10 %, 2 KB a row, 1 GiB.
int64_t dit_activations(Precision p, int64_t S, int64_t K) {
  const int64_t own = (S + K - 1) / K, rows = K > 1 ? K * own : own, Ft = (F + K - 1) / K;
  const int64_t mlp = rows * (p == Precision::fp8 ? 9 * H + 5 * Ft : 10 * H + 6 * Ft);
  const int64_t live = std::max(mlp, own * 2 * (4 * H + 3 * I));
  return live + live / 10 + S * 2048 + kGiB;
}
// The text tower: per token 4 x 5120 + 2 x 64 x 128 + 2 x 8 x 128 + 3 x 25600 values, bf16, and 1 GiB.
int64_t text_activations(int64_t tokens) {
  return tokens * (4 * kTh + 2 * 64 * D + 2 * 8 * D + 3 * kTi) * 2 + kGiB;
}

using test::Geometry;
using test::k480;
using test::k768;

MemoryPlanInputs inputs(const Geometry& g, Precision dit, int K, int64_t budget_gib) {
  MemoryPlanInputs in = test::released_inputs(g, dit, Precision::bf16);
  if (K > 1) in.mode = DistMode::tensor, in.K = K, in.text_tp = K;
  in.width = g.width, in.height = g.height, in.frames = 124;
  in.dit_calls = 49;
  in.budget_bytes = budget_gib * kGiB;
  in.policy = MemoryPolicy::phases;
  return in;
}

// A layered model in its phase with `room` bytes for its layers and their ring (memory_plan.h): all resident when
// they fit; else a ring of 3 slots (2 when 3 do not fit) and as many resident as the rest holds; -1 when not even
// the ring of 2 fits.
struct Expected {
  int resident = 0, slots = 0;
};
Expected expected_layers(int64_t layers, int64_t layer, int64_t room) {
  if (layers * layer <= room) return {static_cast<int>(layers), 0};
  for (int slots : {3, 2})
    if (room - slots * layer >= 0) return {static_cast<int>((room - slots * layer) / layer), slots};
  return {-1, 0};
}

// The VAE's own count (model/vae/video_vae.h) of its largest decode unit at this geometry, and the units a stacked
// call may take (at most 32 and a chunk row's tiles).
int64_t largest_vae_unit(const Geometry& g) {
  const VideoVaeConfig c;
  const VideoDecodePlan plan = video_decode_plan(c, {c.latent_channels, g.T, g.h, g.w});
  int64_t unit = 0;
  for (const VideoDecodeUnit& u : plan.units)
    unit = std::max(unit, video_decoder_unit_bytes(c, Precision::bf16, u.t1 - u.t0, u.y1 - u.y0, u.x1 - u.x0));
  return unit;
}
int64_t vae_max_batch(const Geometry& g) {
  const VideoVaeConfig c;
  const VideoDecodePlan plan = video_decode_plan(c, {c.latent_channels, g.T, g.h, g.w});
  return std::min<int64_t>(VideoVae::kMaxDecodeBatch,
                           static_cast<int64_t>(plan.rows.starts.size() * plan.cols.starts.size()));
}

double gib(int64_t b) {
  return static_cast<double>(b) / static_cast<double>(kGiB);
}

struct Case {
  Geometry g;
  Precision p;
  int K;
};

std::string label(const Case& c, int64_t budget) {
  return fmt::format("{} {} K={} at {} GiB", c.g.name, precision_name(c.p), c.K, budget);
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (const Geometry& g : {k480, k768})
    for (Precision p : {Precision::bf16, Precision::fp8})
      for (int K : {1, 2, 4}) cases.push_back({g, p, K});
  return cases;
}

constexpr int64_t kCards[] = {12, 16, 24, 32, 48, 80};

}  // namespace

TEST(MemoryPlanBudget, BlockAndLayerBytesFromTheConfigs) {
  const DitConfig c = *DitConfig::named("full");
  for (Precision p : {Precision::bf16, Precision::fp8})
    for (int K : {1, 2, 4}) {
      const MemoryPlan m = plan_memory(inputs(k768, p, K, 80));
      SCOPED_TRACE(label({k768, p, K}, 80));
      EXPECT_EQ(m.dit.layers, 50);
      EXPECT_EQ(m.dit.layer_bytes, block_bytes(p, K));
      EXPECT_EQ(m.dit_weights, kDitBase + kBlocks * block_bytes(p, K));
      EXPECT_EQ(m.text.layers, 50);
      EXPECT_EQ(m.text.layer_bytes, text_layer_bytes(K));
      EXPECT_EQ(m.text_weights, kTextBase + kTextLayers * text_layer_bytes(K));
    }
  // The whole DiT as test_memory_plan.cpp has it: 61.73 GiB bf16, 43.80 GiB FP8.
  EXPECT_NEAR(gib(kDitBase + kBlocks * block_bytes(Precision::bf16, 1)), 61.7285, 0.001);
  EXPECT_NEAR(gib(kDitBase + kBlocks * block_bytes(Precision::fp8, 1)), 43.7955, 0.001);
  (void)c;
}

// Every case on every card: the phases plan of h3 generate, with the budget given (room = budget - 1 GiB).
TEST(MemoryPlanBudget, WhatEachCardHoldsAndStreams) {
  int fitted = 0;
  for (const Case& c : all_cases())
    for (int64_t budget : kCards) {
      SCOPED_TRACE(label(c, budget));
      const MemoryPlan m = plan_memory(inputs(c.g, c.p, c.K, budget));
      const int64_t room = budget * kGiB - kGiB;
      EXPECT_EQ(m.room(), room);
      const int64_t block = block_bytes(c.p, c.K), act = dit_activations(c.p, c.g.S, c.K);
      const Expected dit = expected_layers(kBlocks, block, room - kDitBase - act);
      const int64_t tl = text_layer_bytes(c.K), tact = text_activations(c.g.L);
      const Expected text = expected_layers(kTextLayers, tl, room - kTextBase - tact);
      const int64_t minimum = std::max(kDitBase + 2 * block + act, kTextBase + 2 * tl + tact) + kGiB;
      EXPECT_GE(m.minimum_bytes, minimum);
      if (dit.resident < 0 || text.resident < 0) {
        EXPECT_FALSE(m.fits);
        EXPECT_LT(budget * kGiB, minimum);
        continue;
      }
      if (!m.fits) {  // then only the decode phase can be what does not fit
        EXPECT_GT(m.phase("decode").peak(), room);
        continue;
      }
      ++fitted;
      // The DiT in denoise: resident blocks, the ring, the bytes streamed a forward and what 49 forwards cost at
      // 55.5 GB/s when nothing overlaps (no compute time given).
      EXPECT_EQ(m.dit.resident, dit.resident);
      EXPECT_EQ(m.dit.ring_slots, dit.slots);
      const PhaseMemory& den = m.phase("denoise");
      const int64_t streamed = (kBlocks - dit.resident) * block;
      EXPECT_EQ(den.streamed, streamed);
      EXPECT_EQ(den.activations, act);
      EXPECT_EQ(den.ring, dit.slots * block);
      EXPECT_EQ(den.weights, kDitBase + dit.resident * block);
      EXPECT_EQ(den.passes, 49);
      EXPECT_NEAR(den.copy_s, static_cast<double>(streamed) / 55.5e9, 1e-9);
      EXPECT_NEAR(den.slowdown_s, 49 * static_cast<double>(streamed) / 55.5e9, 1e-6);
      EXPECT_EQ(den.host_pinned, streamed);  // the streamed blocks wait in pinned host memory
      EXPECT_LE(den.peak(), room);
      // The text tower in encode, one pass.
      EXPECT_EQ(m.text.resident, text.resident);
      EXPECT_EQ(m.text.ring_slots, text.slots);
      const PhaseMemory& enc = m.phase("encode");
      EXPECT_EQ(enc.streamed, (kTextLayers - text.resident) * tl);
      EXPECT_NEAR(enc.slowdown_s, static_cast<double>((kTextLayers - text.resident) * tl) / 55.5e9, 1e-9);
      EXPECT_LE(enc.peak(), room);
      // The VAE decode stacks as many units as the room left holds (1 .. 32 and a chunk row), each unit's bytes
      // from the VAE's own count.
      const PhaseMemory& dec = m.phase("decode");
      EXPECT_LE(dec.peak(), room);
      EXPECT_GE(m.vae.batch, 1);
      EXPECT_LE(m.vae.batch, VideoVae::kMaxDecodeBatch);
      const int64_t unit = largest_vae_unit(c.g), fixed = dec.activations - m.vae.batch * unit;
      EXPECT_EQ(m.vae.stack_bytes, room - m.vae_weights - fixed);
      EXPECT_EQ(m.vae.batch, std::min<int64_t>(m.vae.stack_bytes / unit, vae_max_batch(c.g)));
      if (m.vae.batch < vae_max_batch(c.g)) {
        EXPECT_GT(m.vae_weights + fixed + (m.vae.batch + 1) * unit, room);
      }
    }
  // With 1 GiB for the runtime every case fits 12 GiB and up (the refusals are below, under smaller budgets).
  EXPECT_EQ(fitted, 12 * 6);
}

// The minimum is exact: a budget of the minimum fits, one MiB less is refused naming it.
TEST(MemoryPlanBudget, TheMinimumBudgetIsTheEdge) {
  for (const Case& c : all_cases()) {
    SCOPED_TRACE(label(c, 0));
    MemoryPlanInputs in = inputs(c.g, c.p, c.K, 80);
    const int64_t minimum = plan_memory(in).minimum_bytes;
    // At least the denoise and encode phases with every layer streamed through a ring of 2, and the runtime's 1 GiB.
    const int64_t block = block_bytes(c.p, c.K), act = dit_activations(c.p, c.g.S, c.K);
    const int64_t tl = text_layer_bytes(c.K), tact = text_activations(c.g.L);
    EXPECT_GE(minimum, std::max(kDitBase + 2 * block + act, kTextBase + 2 * tl + tact) + kGiB);
    in.budget_bytes = minimum;
    const MemoryPlan at = plan_memory(in);
    EXPECT_TRUE(at.fits) << at.problem;
    in.budget_bytes = minimum - (int64_t{1} << 20);
    const MemoryPlan below = plan_memory_or_suggest(in);
    EXPECT_FALSE(below.fits);
    EXPECT_EQ(below.problem.rfind("this request needs at least ", 0), 0u) << below.problem;
  }
}

// 768p bf16 on one rank: the denoise phase sets the minimum (activations 6.5 + 2 blocks 2.4 + the DiT outside its
// blocks 1.6 + 1 GiB), 11.5 GiB; a 10 GiB budget is refused with this message, naming the minimum and what to do.
// FP8 needs 10.1 GiB (activations 5.8 + 2 x 0.84 + 1.6 + 1), so only two tensor ranks are named.
TEST(MemoryPlanBudget, ARefusalNamesTheMinimumAndWhatToDo) {
  const int64_t block = block_bytes(Precision::bf16, 1), act = dit_activations(Precision::bf16, k768.S, 1);
  const int64_t minimum = kDitBase + 2 * block + act + kGiB;
  const double shown = std::ceil(gib(minimum) * 10) / 10;
  EXPECT_NEAR(shown, 11.5, 1e-9);
  const MemoryPlan m = plan_memory_or_suggest(inputs(k768, Precision::bf16, 1, 10));
  ASSERT_FALSE(m.fits);
  EXPECT_EQ(m.minimum_bytes, minimum);
  const std::string expected = fmt::format(
      "this request needs at least {:.1f} GiB of GPU memory at 1344x768, 124 frames, DiT bf16 (the denoise phase: "
      "activations {:.1f} + a ring of 2 x {:.2f} + the DiT outside its blocks {:.1f} + runtime 1.0 GiB); the budget is "
      "10.0 GiB: give --max-device-memory {:.1f}GiB or more (the GPU needs that much free); would fit: --ranks 2 "
      "--mode tensor (each rank a GPU with this budget)",
      shown, gib(act), gib(block), gib(kDitBase), shown);
  EXPECT_EQ(m.problem, expected);
  // The plan's own lines end with the problem.
  EXPECT_EQ(m.describe().back(), "  " + expected);
}

TEST(MemoryPlanBudget, ABudgetLargerThanTheGpuIsRefused) {
  MemoryPlanInputs in = inputs(k480, Precision::fp8, 1, 24);
  in.device_bytes = 20 * kGiB;  // free on the GPU at start
  const MemoryPlan m = plan_memory_or_suggest(in);
  EXPECT_FALSE(m.fits);
  EXPECT_EQ(m.problem,
            "the budget of 24.0 GiB is larger than the 20.0 GiB free on this GPU: give --max-device-memory (or "
            "H3_MAX_DEVICE_MEMORY) at most 20.0 GiB, or leave it out (what is free less 0.5 GiB)");
}

// No budget: what is free less 512 MiB (backend/budget.h's margin), of which 1 GiB goes to the runtime.
TEST(MemoryPlanBudget, TheDefaultBudgetIsWhatIsFreeLessTheMargin) {
  MemoryPlanInputs in = inputs(k768, Precision::fp8, 1, 0);
  in.device_bytes = 24 * kGiB;
  const MemoryPlan m = plan_memory(in);
  EXPECT_EQ(m.budget_bytes, 24 * kGiB - (int64_t{512} << 20));
  EXPECT_EQ(m.room(), 24 * kGiB - (int64_t{512} << 20) - kGiB);
  EXPECT_TRUE(m.fits) << m.problem;
}

// With the compute time of a forward known, the copies hide behind it: a forward loses the copies beyond the compute
// and the first streamed block's copy. 768p FP8 at 24 GiB with 3.38 s a forward (the H200's): the streamed blocks
// take well under 3.38 s at 55.5 GB/s, so each forward loses one block's copy, 16 ms.
TEST(MemoryPlanBudget, CopiesHideBehindKnownCompute) {
  MemoryPlanInputs in = inputs(k768, Precision::fp8, 1, 24);
  in.dit_forward_s = 3.38;
  const MemoryPlan m = plan_memory(in);
  ASSERT_TRUE(m.fits) << m.problem;
  const int64_t block = block_bytes(Precision::fp8, 1);
  const PhaseMemory& den = m.phase("denoise");
  ASSERT_GT(den.streamed, 0);
  EXPECT_LT(den.copy_s, 3.38);
  EXPECT_NEAR(den.slowdown_s, 49 * static_cast<double>(block) / 55.5e9, 1e-9);
  EXPECT_NEAR(static_cast<double>(block) / 55.5e9, 0.0163, 0.0001);
  // A slow link (4 GB/s) no longer hides: each forward loses copy - compute + a block.
  in.link_gbps = 4;
  const PhaseMemory slow = plan_memory(in).phase("denoise");
  const double copy = static_cast<double>(slow.streamed) / 4e9;
  EXPECT_NEAR(slow.slowdown_s, 49 * (copy - 3.38 + static_cast<double>(block) / 4e9), 1e-6);
}

// The block printed before anything loads: the budget line and one line per phase with what is resident, what
// streams and what that costs.
TEST(MemoryPlanBudget, ThePrintedPlanSaysWhatStreamsAndWhatItCosts) {
  const MemoryPlan m = plan_memory(inputs(k768, Precision::fp8, 1, 24));
  ASSERT_TRUE(m.fits) << m.problem;
  const std::vector<std::string> lines = m.describe();
  for (const auto& line : lines) std::printf("%s\n", line.c_str());
  ASSERT_EQ(lines.size(), 4u);
  EXPECT_EQ(lines[0].rfind("memory plan (phases): budget 24.0 GiB (1.0 for the runtime)", 0), 0u) << lines[0];
  const int streamed = 50 - m.dit.resident;
  EXPECT_NE(lines[2].find(
                fmt::format("{} of 50 blocks resident, {} streamed through 3 x 0.84 GiB", m.dit.resident, streamed)),
            std::string::npos)
      << lines[2];
  EXPECT_NE(lines[2].find("over the link a forward"), std::string::npos) << lines[2];
  EXPECT_NE(lines[1].find("layers resident"), std::string::npos) << lines[1];
  EXPECT_NE(lines[3].find("units a batch"), std::string::npos) << lines[3];
}

// Host memory (memory_plan.h, the streamer's rule of io/layer_stream.h): a phase streams from page-locked copies while
// they fit the host memory given with 8 GiB beside them, else from the checkpoint through its staging ring, which
// must fit the same way; the printed plan and its JSON say which. 768p FP8 at 24 GiB: the DiT streams 36 blocks of
// 0.84 GiB (30.4 GiB), the text tower 32 layers of 0.91 GiB (29.1 GiB).
TEST(MemoryPlanBudget, StreamsComeFromTheCheckpointWhenHostMemoryIsShort) {
  MemoryPlanInputs in = inputs(k768, Precision::fp8, 1, 24);
  const MemoryPlan unlimited = plan_memory(in);
  ASSERT_TRUE(unlimited.fits) << unlimited.problem;
  const PhaseMemory& den0 = unlimited.phase("denoise");
  const PhaseMemory& enc0 = unlimited.phase("encode");
  ASSERT_GT(den0.streamed, enc0.streamed);
  EXPECT_FALSE(den0.from_checkpoint || enc0.from_checkpoint);
  const int64_t margin = kParkHostMarginBytes;
  // Just enough for the DiT's copies: both phases pinned.
  in.host_bytes = den0.streamed + margin;
  MemoryPlan m = plan_memory(in);
  EXPECT_TRUE(m.fits) << m.problem;
  EXPECT_FALSE(m.phase("denoise").from_checkpoint);
  EXPECT_EQ(m.phase("denoise").host_pinned, den0.streamed);
  // A byte less: the DiT reads its blocks from the checkpoint, through a ring of staging buffers; the text tower's
  // smaller copies still fit.
  in.host_bytes = den0.streamed + margin - 1;
  m = plan_memory(in);
  ASSERT_TRUE(m.fits) << m.problem;
  const PhaseMemory& den = m.phase("denoise");
  EXPECT_TRUE(den.from_checkpoint);
  EXPECT_EQ(den.host_pinned, m.dit.ring_bytes());
  EXPECT_NEAR(den.gbps, kDiskGBps, 1e-12);
  EXPECT_FALSE(m.phase("encode").from_checkpoint);
  EXPECT_FALSE(m.phase("decode").from_checkpoint) << "nothing streams in decode";
  EXPECT_NE(m.describe()[2].find("from the checkpoint (host memory short)"), std::string::npos) << m.describe()[2];
  EXPECT_NE(m.describe()[1].find("from page-locked copies"), std::string::npos) << m.describe()[1];
  EXPECT_NE(m.describe()[0].find(fmt::format("of {:.1f} given", gib(in.host_bytes))), std::string::npos);
  const nlohmann::json j = m.to_json();
  EXPECT_EQ(j["host_limit_bytes"], in.host_bytes);
  EXPECT_EQ(j["phases"][1]["from_checkpoint"], true);
  // 16 GiB: both from the checkpoint.
  in.host_bytes = 16 * kGiB;
  m = plan_memory(in);
  ASSERT_TRUE(m.fits) << m.problem;
  EXPECT_TRUE(m.phase("encode").from_checkpoint && m.phase("denoise").from_checkpoint);
  // Not even a staging ring beside the margin: refused, naming the first phase whose ring does not fit (the text
  // tower's 3 layers are larger than the DiT's 3 FP8 blocks) and what to do.
  ASSERT_GT(m.text.ring_bytes(), m.dit.ring_bytes());
  in.host_bytes = margin + m.text.ring_bytes() - 1;
  m = plan_memory(in);
  EXPECT_FALSE(m.fits);
  EXPECT_NE(m.problem.find("the encode phase streams the text tower's layers from the checkpoint"), std::string::npos)
      << m.problem;
  EXPECT_NE(m.problem.find("--host-memory"), std::string::npos) << m.problem;
}

}  // namespace h3

namespace h3 {

// The plan's host memory per phase against what two runs held (peak RSS per phase in their run records; H100,
// budget_matrix.sh: docs/results/budget-matrix-h100-2026-12-06c.json gen768-fp8-16 and -06b.json gen768-bf16-24),
// planned with the budgets those runs planned with. The page-locked pool keeps a request's blocks until its end: the
// FP8 DiT's blocks (0.84 GiB) reuse the text tower's records (0.91 GiB) and add the rest, and the decode still holds
// them; the bf16 DiT's blocks (1.20 GiB) fit no record, so its first block frees them. The plan before this rule said
// 43.8 / 3.7 GB for the FP8 run's denoise / decode, which held 45.2 / 47.4.
TEST(MemoryPlanBudget, HostMemoryCoversWhatTheRunsHeld) {
  struct Run {
    Precision dit;
    int64_t budget, device;  // the run record's memory_plan budget_bytes and device_bytes
    int text_streamed, dit_streamed;
    int64_t rss[3];  // host_rss_peak_bytes: encode, denoise, the larger of the two decodes
  };
  const Run runs[] = {
      {Precision::fp8, 15555231744, 16092102656, 41, 46, {40469676032, 45214507008, 47440285696}},
      {Precision::bf16, 24145166336, 24682037248, 33, 42, {32668758016, 54927192064, 57312522240}},
  };
  for (const Run& r : runs) {
    MemoryPlanInputs in = inputs(k768, r.dit, 1, 0);
    in.budget_bytes = r.budget;
    in.device_bytes = r.device;
    const MemoryPlan m = plan_memory(in);
    ASSERT_TRUE(m.fits) << m.problem;
    ASSERT_EQ(m.text.streamed(), r.text_streamed);  // the residency the runs had
    ASSERT_EQ(m.dit.streamed(), r.dit_streamed);
    for (int i = 0; i < 3; ++i)
      EXPECT_GE(m.phases[i].host_bytes, r.rss[i]) << precision_name(r.dit) << " " << m.phases[i].phase;
    const int64_t text_records = int64_t{r.text_streamed} * m.text.layer_bytes;
    EXPECT_EQ(m.phase("encode").host_pool, text_records);
    const int64_t denoise_pool = r.dit == Precision::fp8
                                     ? text_records + int64_t{r.dit_streamed - r.text_streamed} * m.dit.layer_bytes
                                     : m.dit.streamed_bytes();
    EXPECT_EQ(m.phase("denoise").host_pool, denoise_pool) << precision_name(r.dit);
    EXPECT_EQ(m.phase("denoise").host_pinned, m.dit.streamed_bytes());  // what the DiT's streamer parks
    EXPECT_EQ(m.phase("decode").host_pool, denoise_pool) << "kept until the request's end";
    EXPECT_EQ(m.host_peak(), m.phase("decode").host_bytes);
  }
}

}  // namespace h3

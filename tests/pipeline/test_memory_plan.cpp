// The device-memory plan (pipeline/memory_plan.h) with the released configs on an H200 (139.8 GiB), on the CPU. The
// DiT's estimates are held against the peaks measured on the H200 (docs/notes.md, `h3 bench`: 64.0 / 67.0 GiB bf16,
// up to 46.2 / 49.2 GiB FP8 at 480p / 768p): never below them (a plan must not promise memory that is not there),
// at most 6 % above.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pipeline/memory_plan.h"
#include "support/released_geometry.h"

namespace h3 {
namespace {

constexpr int64_t kH200 = static_cast<int64_t>(139.8 * kGiB);
constexpr double kGB = 1e9;

using test::Geometry;
using test::k480;
using test::k768;

MemoryPlanInputs released(const Geometry& g, Precision dit, Precision text, MemoryPolicy policy) {
  MemoryPlanInputs in = test::released_inputs(g, dit, text);
  in.device_bytes = kH200;
  in.policy = policy;
  return in;
}

double gib(int64_t b) {
  return static_cast<double>(b) / static_cast<double>(kGiB);
}

}  // namespace

TEST(MemoryPlan, DitWeightsAtTheReleasedWidths) {
  const DitConfig c = *DitConfig::named("full");
  // 33,122,992,896 parameters, 2 bytes each, and 2 more for each of the 17,222,144 in the f32 layers (patch
  // projections, time MLP, output heads): 66,280,430,080 bytes. FP8: the 19,267,584,000 block GEMM weights at one
  // byte, plus one f32 scale per row (60,928 rows a block).
  EXPECT_NEAR(gib(dit_weight_bytes(c, Precision::bf16)), 61.7285, 0.001);
  EXPECT_NEAR(gib(dit_weight_bytes(c, Precision::fp8)), 43.7955, 0.001);
  // Tensor-parallel over 4: rank 0 holds a quarter of the block GEMMs and AdaLN rows; the refiner (2 blocks, 1.4 GiB),
  // embeddings and heads stay whole.
  const double tp4 = gib(dit_weight_bytes(c, Precision::bf16, DistMode::tensor, 4, 1));
  EXPECT_GT(tp4, 61.7285 / 4);
  EXPECT_LT(tp4, 61.7285 / 4 + 1.6);
}

TEST(MemoryPlan, DitPhaseCoversTheMeasuredPeaksOnAnH200) {
  struct Case {
    Geometry g;
    Precision p;
    double measured_gib;
  };
  for (const Case& c : {Case{k480, Precision::bf16, 64.0}, Case{k768, Precision::bf16, 67.0},
                        Case{k480, Precision::fp8, 46.2}, Case{k768, Precision::fp8, 49.2}}) {
    const MemoryPlan m = plan_memory(released(c.g, c.p, Precision::bf16, MemoryPolicy::phases));
    const double est = gib(m.phase("denoise").peak());
    SCOPED_TRACE(testing::Message() << "S " << c.g.S << " " << precision_name(c.p) << ": estimate " << est
                                    << " GiB, measured " << c.measured_gib);
    EXPECT_GE(est, c.measured_gib);
    EXPECT_LE(est, c.measured_gib * 1.06);
  }
}

// Issue 24's bound: 768p x 124 frames in bf16 on one H200 with every phase at most 100 GB, room to spare.
TEST(MemoryPlan, Bf16At768pFitsOneH200PhaseByPhaseUnder100GB) {
  const MemoryPlan m = plan_memory(released(k768, Precision::bf16, Precision::bf16, MemoryPolicy::phases));
  ASSERT_TRUE(m.fits) << m.problem;
  EXPECT_FALSE(m.dit_resident || m.text_resident || m.vae_resident);
  for (const auto& ph : m.phases) EXPECT_LE(ph.peak(), 100 * kGB) << ph.phase << " " << gib(ph.peak()) << " GiB";
  EXPECT_GE(kH200 - m.peak(), 30 * kGiB);
  // The text tower in bf16: 50 layers + embeddings, 25.2 B parameters.
  EXPECT_NEAR(gib(m.text_weights), 46.9, 0.1);
  EXPECT_EQ(m.phases.size(), 3u);
  EXPECT_EQ(m.phase("encode").model, "text tower");
  EXPECT_EQ(m.phase("denoise").model, "DiT");
  EXPECT_EQ(m.phase("decode").model, "VAEs");
  for (const auto& line : m.describe()) std::printf("%s\n", line.c_str());
}

TEST(MemoryPlan, Fp8At768pFitsWithEverythingResidentForAServer) {
  // A server plans for the longest request it accepts: 345 frames (102 latent frames, 575 audio latents) at 768p.
  MemoryPlanInputs in = released(k768, Precision::fp8, Precision::bf16, MemoryPolicy::automatic);
  in.latent_frames = 102;
  in.audio_latents = 575;
  in.seq_len = in.text_tokens + 2 * in.audio_latents + 102 * 24 * 42;
  const MemoryPlan m = plan_memory(in);
  ASSERT_TRUE(m.fits) << m.problem;
  EXPECT_TRUE(m.dit_resident && m.text_resident && m.vae_resident);
  EXPECT_TRUE(m.phase("denoise").model.empty());
  EXPECT_EQ(m.phase("denoise").weights, 0);
  for (const auto& line : m.describe()) std::printf("%s\n", line.c_str());
}

TEST(MemoryPlan, AutoKeepsTheDitAndPartOfTheF32TextTower) {
  // The text tower in f32 on the GPU (93.7 GiB) cannot stay whole beside the bf16 DiT (61.7 GiB). Auto keeps the whole
  // DiT and the VAEs between requests, then as many of the tower's decoder layers as cost the DiT no block; the
  // others stream through a ring of 3 in the encode phase.
  const MemoryPlan m = plan_memory(released(k768, Precision::bf16, Precision::f32, MemoryPolicy::automatic));
  ASSERT_TRUE(m.fits) << m.problem;
  EXPECT_TRUE(m.dit_resident);
  EXPECT_FALSE(m.text_resident);
  EXPECT_TRUE(m.vae_resident);
  EXPECT_NEAR(gib(m.text_weights), 93.7, 0.1);
  // One f32 layer: 487,598,336 values x 4 bytes; the embeddings 151,936 x 5120 x 4.
  const int64_t layer = int64_t{487'598'336} * 4, embeddings = int64_t{151936} * 5120 * 4;
  EXPECT_EQ(m.text.layer_bytes, layer);
  const int kept = m.kept.text_layers;
  EXPECT_GT(kept, 0);
  EXPECT_LT(kept, 50);
  EXPECT_EQ(m.text.resident, kept);
  EXPECT_EQ(m.text.ring_slots, 3);
  const PhaseMemory& enc = m.phase("encode");
  EXPECT_EQ(enc.resident, m.dit_weights + m.vae_weights + embeddings + int64_t{kept} * layer);
  EXPECT_EQ(enc.weights, 0);
  EXPECT_EQ(enc.ring, 3 * layer);
  EXPECT_EQ(enc.streamed, int64_t{50 - kept} * layer);
  // One more kept layer would not fit beside the whole DiT.
  MemoryPlanInputs in = released(k768, Precision::bf16, Precision::f32, MemoryPolicy::automatic);
  const MemoryPlan more = plan_memory_kept(in, {50, kept + 1, true});
  EXPECT_FALSE(more.fits && more.dit.resident == 50);
}

// Models that load whole (h3 serve until the DiT and the text tower stream) are kept whole or not at all, the old
// rule: the whole f32 tower (93.7 GiB) cannot be loaded beside the kept DiT (61.7) and VAEs, so auto keeps the VAEs
// only and loads the DiT and the tower for their phases.
TEST(MemoryPlan, AutoKeepsWholeModelsWhenLayersDoNotStream) {
  MemoryPlanInputs in = released(k768, Precision::bf16, Precision::f32, MemoryPolicy::automatic);
  in.stream_layers = false;
  const MemoryPlan m = plan_memory(in);
  ASSERT_TRUE(m.fits) << m.problem;
  EXPECT_FALSE(m.dit_resident);
  EXPECT_FALSE(m.text_resident);
  EXPECT_TRUE(m.vae_resident);
  EXPECT_EQ(m.kept.dit_blocks, 0);
  EXPECT_EQ(m.kept.text_layers, 0);
  EXPECT_EQ(m.text.streamed(), 0);
  EXPECT_EQ(m.phase("encode").weights, m.text_weights);
}

TEST(MemoryPlan, ResidentBf16WithAnF32TextTowerIsRefusedNamingWhatFits) {
  const MemoryPlan m = plan_memory_or_suggest(released(k768, Precision::bf16, Precision::f32, MemoryPolicy::resident));
  EXPECT_FALSE(m.fits);
  EXPECT_NE(m.problem.find("the encode phase needs"), std::string::npos) << m.problem;
  // auto keeps what fits and streams the rest: the first thing to try.
  EXPECT_NE(m.problem.find("--memory-plan auto"), std::string::npos) << m.problem;
}

// Models that load whole (stream_layers false: every layer resident or the phase does not fit). An H100 80GB has
// 79.1 GiB (81,559 MiB), about 78.5 free once the CUDA context exists: the default budget 78.0, 77.0 for the plan,
// below the 77.8 GiB the denoise phase of 345 frames takes in bf16 (the whole DiT 61.7 + activations 16.1).
TEST(MemoryPlan, AnH100SizedGpuRefusesTheLongestBf16VideoAndNamesFp8AndFewerFrames) {
  MemoryPlanInputs in = released(k768, Precision::bf16, Precision::bf16, MemoryPolicy::phases);
  in.device_bytes = static_cast<int64_t>(78.5 * kGiB);
  in.stream_layers = false;
  auto at_frames = [&](int64_t frames) -> std::optional<MemoryPlanInputs> {
    // 17n + 5 frames -> 5n + 2 latent frames (124 -> 37, 243 -> 72, 345 -> 102: the released chunking), audio
    // latents 40 per second at 24 fps.
    if ((frames - 5) % 17 != 0 || frames < 124 || frames > 345) return std::nullopt;
    MemoryPlanInputs x = in;
    x.latent_frames = (frames - 5) / 17 * 5 + 2;
    x.audio_latents = (frames * 32000 / 24 + 799) / 800;
    x.seq_len = x.text_tokens + 2 * x.audio_latents + x.latent_frames * 24 * 42;
    return x;
  };
  const MemoryPlanInputs longest = *at_frames(345);
  std::vector<int64_t> choices;
  for (int64_t f = 345; f >= 124; f -= 17) choices.push_back(f);
  const MemoryPlan m = plan_memory_or_suggest(longest, at_frames, choices);
  ASSERT_FALSE(m.fits);
  EXPECT_NE(m.problem.find("(the denoise phase: activations 16.1 + its 50 blocks 60.1 + the DiT outside its blocks"),
            std::string::npos)
      << m.problem;
  EXPECT_NE(m.problem.find("this GPU has 78.5 GiB free"), std::string::npos) << m.problem;
  EXPECT_NE(m.problem.find("--precision fp8"), std::string::npos) << m.problem;
  const size_t at = m.problem.find("--frames ");
  ASSERT_NE(at, std::string::npos) << m.problem;
  const int64_t suggested = std::stoll(m.problem.substr(at + 9));
  EXPECT_LT(suggested, 345);
  EXPECT_TRUE(plan_memory(*at_frames(suggested)).fits);
  EXPECT_FALSE(plan_memory(*at_frames(suggested + 17)).fits);
  // 124 frames fit an 80 GiB GPU in bf16, phase by phase.
  EXPECT_TRUE(plan_memory(in).fits);
  // Streaming the blocks that do not fit, the longest video fits too.
  MemoryPlanInputs streamed = longest;
  streamed.stream_layers = true;
  const MemoryPlan s = plan_memory(streamed);
  EXPECT_TRUE(s.fits) << s.problem;
  EXPECT_GT(s.dit.streamed(), 0);
}

TEST(MemoryPlan, TheF32TextTowerOnASmallGpuSuggestsTheCpu) {
  MemoryPlanInputs in = released(k480, Precision::fp8, Precision::f32, MemoryPolicy::phases);
  in.device_bytes = 80 * kGiB;
  in.stream_layers = false;  // the tower loads whole
  const MemoryPlan m = plan_memory_or_suggest(in);
  ASSERT_FALSE(m.fits);
  // The whole f32 tower needs more than the budget: the minimum names the encode phase.
  EXPECT_NE(m.problem.find("needs at least 95.8 GiB"), std::string::npos) << m.problem;
  EXPECT_NE(m.problem.find("(the encode phase: text embeddings 2.9 + its 50 layers 90.8"), std::string::npos)
      << m.problem;
  EXPECT_NE(m.problem.find("--text-device cpu"), std::string::npos) << m.problem;
  in.text_on_gpu = false;
  EXPECT_TRUE(plan_memory(in).fits);
  // Streamed by layer, the f32 tower fits on the GPU.
  in.text_on_gpu = true;
  in.stream_layers = true;
  EXPECT_TRUE(plan_memory(in).fits);
}

TEST(MemoryPlan, EncoderRanksHoldTheTowerElsewhere) {
  MemoryPlanInputs in = released(k768, Precision::bf16, Precision::f32, MemoryPolicy::resident);
  in.text_elsewhere = true;
  const MemoryPlan m = plan_memory(in);
  EXPECT_TRUE(m.fits) << m.problem;
  EXPECT_EQ(m.text_weights, 0);
  EXPECT_EQ(m.phase("encode").peak(), m.phase("encode").resident);
}

TEST(MemoryPlan, VaePhaseAndJson) {
  const MemoryPlan m = plan_memory(released(k768, Precision::bf16, Precision::bf16, MemoryPolicy::phases));
  const PhaseMemory& dec = m.phase("decode");
  // The video decoder: 36 blocks of 2048-wide attention and an 8192-wide SwiGLU, 2.42 B parameters, bf16 GEMMs.
  EXPECT_GT(gib(dec.weights), 4.4);
  EXPECT_LT(gib(dec.weights), 6.0);
  // Stacked units take at most a quarter of the device.
  EXPECT_LT(dec.activations, kH200 / 4 + 4 * kGiB);
  const nlohmann::json j = m.to_json();
  EXPECT_EQ(j.at("policy"), "phases");
  EXPECT_EQ(j.at("phases").size(), 3u);
  EXPECT_EQ(j.at("peak_bytes").get<int64_t>(), m.peak());
  EXPECT_TRUE(j.at("fits").get<bool>());
}

TEST(MemoryPlan, PolicyNames) {
  EXPECT_EQ(memory_policy_from_name("auto"), MemoryPolicy::automatic);
  EXPECT_EQ(memory_policy_from_name("phases"), MemoryPolicy::phases);
  EXPECT_EQ(memory_policy_name(MemoryPolicy::resident), "resident");
  EXPECT_THROW(memory_policy_from_name("all"), Error);
}

}  // namespace h3

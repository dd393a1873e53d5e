// Where the generator's models go and how long they stay (pipeline/residency.h): the devices from the options, the
// residency from the memory plan, the CPU's fixed rule.
#include <gtest/gtest.h>

#include "distributed/comm.h"
#include "pipeline/residency.h"

namespace {

h3::MemoryPlan plan_keeping(bool dit, bool text, bool vae, bool fits = true) {
  h3::MemoryPlan p;
  p.fits = fits;
  p.dit_resident = dit;
  p.text_resident = text;
  p.vae_resident = vae;
  return p;
}

}  // namespace

TEST(Residency, DevicesComeFromTheOptions) {
  const h3::ModelPlacement cpu =
      h3::placement_from_plan(h3::MemoryPlan{}, h3::default_generate_options(h3::Device::cpu), 0);
  EXPECT_EQ(cpu.dit.device, h3::Device::cpu);
  EXPECT_EQ(cpu.text.device, h3::Device::cpu);
  EXPECT_EQ(cpu.vae.device, h3::Device::cpu);
  h3::GenerateOptions o = h3::default_generate_options(h3::Device::cuda);
  h3::ModelPlacement gpu = h3::placement_from_plan(h3::MemoryPlan{}, o, 80 * h3::kGiB);
  EXPECT_EQ(gpu.dit.device, h3::Device::cuda);
  EXPECT_EQ(gpu.text.device, h3::Device::cuda);
  EXPECT_EQ(gpu.vae.device, h3::Device::cuda);
  EXPECT_EQ(gpu.device_bytes, 80 * h3::kGiB);
  // A DiT in f32 or f64 runs on the CPU beside GPU VAEs; the text tower where --text-device says.
  o.precision = h3::Precision::f32;
  o.text_device = h3::Device::cpu;
  gpu = h3::placement_from_plan(h3::MemoryPlan{}, o, 0);
  EXPECT_EQ(gpu.dit.device, h3::Device::cpu);
  EXPECT_EQ(gpu.text.device, h3::Device::cpu);
  EXPECT_EQ(gpu.vae.device, h3::Device::cuda);
  o.precision = h3::Precision::fp8;
  EXPECT_EQ(h3::placement_from_plan(h3::MemoryPlan{}, o, 0).dit.device, h3::Device::cuda);
}

TEST(Residency, ResidentWhatAFittingPlanKeeps) {
  const h3::GenerateOptions o = h3::default_generate_options(h3::Device::cuda);
  const h3::ModelPlacement all = h3::placement_from_plan(plan_keeping(true, true, true), o, 0);
  EXPECT_TRUE(all.dit.resident && all.text.resident && all.vae.resident);
  const h3::ModelPlacement some = h3::placement_from_plan(plan_keeping(true, false, true), o, 0);
  EXPECT_TRUE(some.dit.resident && !some.text.resident && some.vae.resident);
  // A plan that does not fit keeps nothing (each model is loaded for its phase); so does an empty one (phases).
  const h3::ModelPlacement none = h3::placement_from_plan(plan_keeping(true, true, true, false), o, 0);
  EXPECT_FALSE(none.dit.resident || none.text.resident || none.vae.resident);
  const h3::ModelPlacement phases = h3::placement_from_plan(h3::MemoryPlan{}, o, 0);
  EXPECT_FALSE(phases.dit.resident || phases.text.resident || phases.vae.resident);
}

TEST(Residency, TheCpuKeepsTheDitAndTheVaesAndLoadsTheTextTowerPerRequest) {
  const h3::ModelPlacement p =
      h3::decide_placement(h3::ModelSources{}, h3::default_generate_options(h3::Device::cpu), h3::world());
  EXPECT_TRUE(p.dit.resident);
  EXPECT_TRUE(p.vae.resident);
  EXPECT_FALSE(p.text.resident);
  EXPECT_EQ(p.device_bytes, 0);
}

TEST(Residency, ThePlansLayersReachThePlacement) {
  h3::MemoryPlan p = plan_keeping(false, false, false);
  p.dit = {50, 14, 0, 3, 906'035'712};
  p.text = {50, 18, 0, 3, 975'196'672};
  p.vae.batch = 12;
  const h3::GenerateOptions o = h3::default_generate_options(h3::Device::cuda);
  const h3::ModelPlacement got = h3::placement_from_plan(p, o, 24 * h3::kGiB);
  EXPECT_EQ(got.dit_layers.resident, 14);
  EXPECT_EQ(got.dit_layers.ring_slots, 3);
  EXPECT_EQ(got.dit_layers.streamed(), 36);
  EXPECT_EQ(got.text_layers.resident, 18);
  EXPECT_EQ(got.text_layers.layer_bytes, 975'196'672);
  EXPECT_EQ(got.vae_batch, 12);
  EXPECT_EQ(got.dit_source, h3::ParkSource::pinned);
  // A plan that does not fit places no layers: the models load whole (and the request is refused before that).
  p.fits = false;
  const h3::ModelPlacement none = h3::placement_from_plan(p, o, 24 * h3::kGiB);
  EXPECT_EQ(none.dit_layers.layers, 0);
  EXPECT_EQ(none.vae_batch, 0);
}

// Two ranks sharing one GPU under --max-device-memory 16G with 31 GiB free: the backend lowers each rank's cap to its
// share (agreed_device_bytes), and the plan must start from that share, not refuse the 16 GiB as more than the
// 15.5 GiB the rank has (the H200 run of issue 37's tensor case failed so: "the budget of 16.0 GiB is larger than the
// 15.5 GiB free on this GPU").
TEST(Residency, AnExplicitBudgetPlansWithinTheRanksShareOfASharedGpu) {
  h3::ModelPaths paths;
  paths.model_dir = "procedural:full";
  const h3::ModelSources src = h3::open_model_sources(paths);
  h3::GenerateOptions o = h3::default_generate_options(h3::Device::cuda);
  o.precision = h3::Precision::fp8;
  o.dist.mode = h3::DistMode::tensor;
  o.stream_layers = true;
  o.max_device_bytes = 16 * h3::kGiB;
  h3::GenerateRequest q;
  q.prompt = "a red kite over a windy beach at dusk";
  q.width = 1344;
  q.height = 768;
  q.frames = 124;
  q.steps = 2;
  const h3::ResolvedRequest r = h3::resolve(q, src.limits);
  const int64_t share = 15 * h3::kGiB + h3::kGiB / 2;
  const h3::MemoryPlanInputs shared = h3::plan_inputs(src, o, r, 2, share);
  EXPECT_EQ(shared.budget_bytes, share);
  const h3::MemoryPlan m = h3::plan_memory(shared);
  EXPECT_TRUE(m.fits) << m.problem;
  EXPECT_LE(m.peak(), m.room());
  // A rank with the GPU to itself keeps the budget given; without one, the plan takes what is free (budget 0).
  EXPECT_EQ(h3::plan_inputs(src, o, r, 1, 40 * h3::kGiB).budget_bytes, 16 * h3::kGiB);
  o.max_device_bytes = 0;
  EXPECT_EQ(h3::plan_inputs(src, o, r, 2, share).budget_bytes, 0);
}

// h3 serve under a budget (auto): a plan that keeps some of the DiT's blocks and some text layers keeps those models
// loaded between requests, with the kept layers (the rest stream in their phase), not reloaded per request.
TEST(Residency, APartlyKeptModelStaysLoadedBetweenRequests) {
  h3::MemoryPlan p = plan_keeping(false, false, true);
  p.kept = {13, 4, true};
  p.dit = {50, 17, 13, 3, 906'035'712};
  p.text = {50, 20, 4, 3, 975'196'672};
  const h3::GenerateOptions o = h3::default_generate_options(h3::Device::cuda);
  const h3::ModelPlacement got = h3::placement_from_plan(p, o, 24 * h3::kGiB);
  EXPECT_TRUE(got.dit.resident);
  EXPECT_TRUE(got.text.resident);
  EXPECT_EQ(got.dit_layers.kept, 13);
  EXPECT_EQ(got.text_layers.kept, 4);
  // Nothing kept: loaded for each request's phase.
  p.kept = {0, 0, true};
  const h3::ModelPlacement phase = h3::placement_from_plan(p, o, 24 * h3::kGiB);
  EXPECT_FALSE(phase.dit.resident);
  EXPECT_FALSE(phase.text.resident);
}

// Where each model's streamed layers wait is the plan's from_checkpoint of its phase (encode: the text tower,
// denoise: the DiT), with the host memory it was planned with.
TEST(Residency, ThePlansParkSourcesReachThePlacement) {
  h3::MemoryPlan p = plan_keeping(false, false, false);
  p.phases = {{"encode", "text tower"}, {"denoise", "DiT"}, {"decode", "VAEs"}};
  p.phases[1].from_checkpoint = true;
  const h3::GenerateOptions o = h3::default_generate_options(h3::Device::cuda);
  const h3::ModelPlacement got = h3::placement_from_plan(p, o, 24 * h3::kGiB, 16 * h3::kGiB);
  EXPECT_EQ(got.dit_source, h3::ParkSource::mapped);
  EXPECT_EQ(got.text_source, h3::ParkSource::pinned);
  EXPECT_EQ(got.host_bytes, 16 * h3::kGiB);
  EXPECT_EQ(h3::park_source_of(p, "denoise"), h3::ParkSource::mapped);
  EXPECT_EQ(h3::park_source_of(p, "encode"), h3::ParkSource::pinned);
}

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

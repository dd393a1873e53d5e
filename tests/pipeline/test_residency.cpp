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

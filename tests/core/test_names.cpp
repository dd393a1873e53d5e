// The words of the command line and the logs for each enum (core/names.h tables): every word parses to its value
// and prints back as itself, an unknown word is refused naming what was asked and what is allowed. The expected
// words are the ones docs/api.md and `h3 --help` promise, written out here.
#include <gtest/gtest.h>

#include <array>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"
#include "core/names.h"
#include "core/numerics.h"
#include "distributed/comm_device.h"
#include "distributed/plan.h"
#include "io/quant.h"
#include "model/dit/checkpoint.h"
#include "model/dit/lora.h"
#include "pipeline/memory_plan.h"
#include "support/error_of.h"

namespace h3 {
namespace {

using test::error_of;

TEST(Names, EveryWordParsesToItsValueAndPrintsBack) {
  for (const auto& [w, v] : std::vector<std::pair<std::string, Precision>>{
           {"f64", Precision::f64}, {"f32", Precision::f32}, {"bf16", Precision::bf16}, {"fp8", Precision::fp8}}) {
    EXPECT_EQ(precision_from_name(w), v) << w;
    EXPECT_EQ(precision_name(v), w);
  }
  for (const auto& [w, v] : std::vector<std::pair<std::string, Transport>>{
           {"auto", Transport::automatic}, {"mpi", Transport::mpi}, {"nccl", Transport::nccl}}) {
    EXPECT_EQ(transport_from_name(w), v) << w;
    EXPECT_EQ(transport_name(v), w);
  }
  for (const auto& [w, v] : std::vector<std::pair<std::string, DistMode>>{{"ulysses", DistMode::ulysses},
                                                                          {"ulysses-ag", DistMode::ulysses_ag},
                                                                          {"tensor", DistMode::tensor},
                                                                          {"hybrid", DistMode::hybrid}}) {
    EXPECT_EQ(dist_mode_from_name(w), v) << w;
    EXPECT_EQ(dist_mode_name(v), w);
  }
  for (const auto& [w, v] :
       std::vector<std::pair<std::string, QuantFormat>>{{"none", QuantFormat::none},
                                                        {"fp8", QuantFormat::fp8},
                                                        {"scaled_fp8", QuantFormat::scaled_fp8},
                                                        {"int8", QuantFormat::int8},
                                                        {"int8-convrot", QuantFormat::int8_convrot},
                                                        {"nvfp4", QuantFormat::nvfp4},
                                                        {"mxfp8", QuantFormat::mxfp8}}) {
    EXPECT_EQ(quant_format_from_name(w), v) << w;
    EXPECT_EQ(quant_format_name(v), w);
  }
  EXPECT_EQ(quant_format_from_name(""), QuantFormat::none);  // no --quant: none
  for (const auto& [w, v] : std::vector<std::pair<std::string, MemoryPolicy>>{
           {"auto", MemoryPolicy::automatic}, {"resident", MemoryPolicy::resident}, {"phases", MemoryPolicy::phases}}) {
    EXPECT_EQ(memory_policy_from_name(w), v) << w;
    EXPECT_EQ(memory_policy_name(v), w);
  }
  EXPECT_EQ(fp8_attention_name(Fp8Attention::on), "auto");
  EXPECT_EQ(fp8_attention_name(Fp8Attention::off), "off");
  EXPECT_EQ(fp8_attention_name(Fp8Attention::require), "require");
  EXPECT_EQ(layout_name(DitLayout::official), "official (released)");
  EXPECT_EQ(layout_name(DitLayout::procedural), "procedural");
  EXPECT_EQ(lora_layout_name(LoraLayout::kohya), "kohya/musubi (lora_unet_*, lora_down/lora_up/alpha)");
}

TEST(Names, UnknownWordsAreRefusedNamingWhatIsAllowed) {
  EXPECT_EQ(error_of([] { (void)precision_from_name("fp16"); }),
            "unknown precision 'fp16' (allowed: f64, f32, bf16; fp8 on the GPU)");
  EXPECT_EQ(error_of([] { (void)transport_from_name("gloo"); }), "unknown transport 'gloo' (allowed: auto, mpi, nccl)");
  EXPECT_EQ(error_of([] { (void)dist_mode_from_name("ring"); }),
            "unknown mode 'ring' (allowed: ulysses, ulysses-ag, tensor, hybrid)");
  EXPECT_EQ(error_of([] { (void)quant_format_from_name("q4"); }),
            "unknown quantization 'q4' (allowed: fp8, scaled_fp8, int8, int8-convrot, nvfp4, mxfp8)");
  EXPECT_NE(error_of([] { (void)memory_policy_from_name("all"); }).find("memory plan 'all': expected auto"),
            std::string::npos);
  EXPECT_EQ(error_of([] { (void)precision_from_name("F32"); }).rfind("unknown precision 'F32'", 0), 0u)
      << "words are matched exactly";
}

enum class Color { red, green, blue };
constexpr std::array<Named<Color>, 2> kColors{{{Color::red, "red"}, {Color::green, "green"}}};

TEST(Names, TheTableHelpers) {
  static_assert(name_in(kColors, Color::green) == "green");
  static_assert(name_in(kColors, Color::blue) == "?");  // a value the table lacks
  static_assert(*find_named(kColors, "red") == Color::red);
  static_assert(find_named(kColors, "blue") == nullptr);
  EXPECT_EQ(value_in(kColors, "green", "color", "red, green"), Color::green);
  EXPECT_EQ(error_of([] { (void)value_in(kColors, "blue", "color", "red, green"); }),
            "unknown color 'blue' (allowed: red, green)");
}

}  // namespace
}  // namespace h3

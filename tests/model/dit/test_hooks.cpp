// The DiT forward's debugging hooks (model/dit/hooks.h): a capture keeps exactly the intermediates it names and leaves
// every output bitwise as it was; a capture of every name is keep_activations.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "model/dit/dit.h"
#include "pipeline/synthetic.h"
#include "support/bitwise.h"

using namespace h3;

namespace {

const auto bitwise = test::same_bits;

}  // namespace

TEST(DitCapture, NamesArePrefixes) {
  EXPECT_FALSE(DitCapture{}.any());
  EXPECT_FALSE(DitCapture{}.wants("block.0"));
  EXPECT_TRUE(DitCapture::all().wants("norm_out"));
  const DitCapture c{{"block.1", "norm_out"}};
  EXPECT_TRUE(c.any());
  EXPECT_TRUE(c.wants("block.1"));
  EXPECT_TRUE(c.wants("block.12"));
  EXPECT_TRUE(c.wants("norm_out"));
  EXPECT_FALSE(c.wants("block.2"));
  EXPECT_FALSE(c.wants("token_refiner"));
}

TEST(DitCapture, KeepsTheNamedIntermediatesAndTheSameOutputs) {
  const DitCheckpoint ck = DitCheckpoint::open("procedural:mini");
  ASSERT_GE(ck.config().num_layers, 2);
  for (const Precision p : {Precision::f32, Precision::bf16}) {
    const DitModel m(ck, p);
    const DitInputs in = make_synthetic_inputs(m.config(), SyntheticRequest{});
    const DitOutputs plain = m.forward(in);
    EXPECT_TRUE(plain.activations.empty());
    const DitOutputs some = m.forward(in, DitCapture{{"block.1", "token_refiner"}});
    ASSERT_EQ(some.activations.size(), 2u);
    EXPECT_EQ(some.activations.count("block.1"), 1u);
    EXPECT_EQ(some.activations.count("token_refiner"), 1u);
    const DitOutputs all = m.forward(in, true);
    EXPECT_EQ(all.activations.size(), static_cast<size_t>(ck.config().num_layers) + 2);
    for (const auto& [name, t] : some.activations) EXPECT_TRUE(bitwise(t, all.activations.at(name))) << name;
    for (const DitOutputs* o : {&some, &all}) {
      EXPECT_TRUE(bitwise(o->video, plain.video)) << precision_name(p);
      EXPECT_TRUE(bitwise(o->audio, plain.audio)) << precision_name(p);
    }
  }
}

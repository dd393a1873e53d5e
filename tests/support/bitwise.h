// Bitwise comparisons of host tensors and of DiT runs, for the tests that hold a path to the same bits as another
// (streaming, captures, the sampling loop).
#pragma once
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/dit/dit.h"
#include "pipeline/synthetic.h"

namespace h3::test {

// The same dtype, shape and bytes.
inline bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// Two forwards of the synthetic request at different timesteps (the second reuses what the first left: a streamed
// ring after a full pass, cached tables), outputs side by side.
inline std::vector<DitOutputs> two_forwards(const DitModel& m, bool keep = false) {
  DitInputs in = make_synthetic_inputs(m.config(), SyntheticRequest{});
  std::vector<DitOutputs> out;
  out.push_back(m.forward(in, keep));
  in.timestep =
      Tensor::from(std::vector<float>(static_cast<size_t>(in.timestep.numel()), 0.375f), {in.timestep.numel()});
  out.push_back(m.forward(in, keep));
  return out;
}

// Every forward's video and audio outputs bitwise those of `want`, failures labelled with `what` and the forward.
inline void expect_same_outputs(const std::vector<DitOutputs>& got, const std::vector<DitOutputs>& want,
                                const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t f = 0; f < got.size(); ++f) {
    EXPECT_TRUE(same_bits(got[f].video, want[f].video)) << what << ", forward " << f;
    EXPECT_TRUE(same_bits(got[f].audio, want[f].audio)) << what << ", forward " << f;
  }
}

}  // namespace h3::test

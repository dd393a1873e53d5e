// Synthetic DiT inputs for a request geometry: the real packed layout and row-timestep plan, with seeded random
// rows standing in for latents and prompt embeddings. Used by `h3 forward`, the benchmarks and the parity runs.
#pragma once
#include <cstdint>

#include "model/dit/dit.h"
#include "pipeline/geometry.h"

namespace h3 {

struct SyntheticRequest {
  int64_t num_frames = 22;
  int64_t height = 64, width = 96;
  int64_t num_text = 7;
  float t_video = 0.25f, t_audio = 0.5f;
  uint64_t seed = 0;
};

DitInputs make_synthetic_inputs(const DitConfig& c, const SyntheticRequest& r);

}  // namespace h3

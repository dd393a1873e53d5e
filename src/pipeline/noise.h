// The initial noise of a request (and the seeded rows of synthetic inputs): standard normal f32 values from the
// counter-based generator of core/rng.h, so a seed gives the same latents on every machine, rank count and device.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace h3 {

// Value i of stream `stream` under `seed`: Box-Muller on the uniforms of counters 2i and 2i+1.
Tensor seeded_normal(const Shape& shape, uint64_t seed, uint64_t stream);

}  // namespace h3

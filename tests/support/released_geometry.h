// The released model's two benchmark requests as the memory plan sees them (tests of pipeline/memory_plan.h): the
// packed layouts of shared/golden/layouts.safetensors (t2va_480p_124: S 14,908; t2va_768p_124: S 37,830), their
// prompt rows and latent sizes (124 frames: 37 latent frames, 207 audio latents per channel).
#pragma once
#include <cstdint>
#include <tuple>

#include "pipeline/memory_plan.h"

namespace h3::test {

struct Geometry {
  const char* name;
  int64_t width, height, S, L, T, h, w, A;
};
inline constexpr Geometry k480{"480p", 832, 480, 14908, 64, 37, 30, 52, 207};
inline constexpr Geometry k768{"768p", 1344, 768, 37830, 120, 37, 48, 84, 207};

// The plan's inputs for the released DiT (DitConfig::named("full")) on geometry g; the VAEs in bf16, the rest
// defaults for the caller to set.
inline MemoryPlanInputs released_inputs(const Geometry& g, Precision dit, Precision text) {
  MemoryPlanInputs in;
  in.dit = *DitConfig::named("full");
  in.dit_precision = dit;
  in.text_precision = text;
  in.vae_precision = Precision::bf16;
  // The request, field for field: packed rows, prompt rows, latent frames and size, audio latents per channel.
  std::tie(in.seq_len, in.text_tokens, in.latent_frames, in.latent_h, in.latent_w, in.audio_latents) =
      std::tie(g.S, g.L, g.T, g.h, g.w, g.A);
  return in;
}

}  // namespace h3::test

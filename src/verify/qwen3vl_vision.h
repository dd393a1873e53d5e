// `h3 verify` for the Qwen3-VL vision golden set (scripts/device/make_qwen3vl_vision_golden.py):
// preprocessing, mRoPE positions, the vision tower's embeddings and DeepStack features, and the text
// decoder's hidden states with the vision rows and DeepStack injected: once with ours, once with the
// reference's own rows (lines marked
// "(reference vision rows)", the text tower alone).
#pragma once
#include "io/safetensors.h"
#include "verify/dit.h"

namespace h3 {

// A file with a vision tower ("*patch_embed.proj.weight") and a "vl.input.pixel_values" case.
bool looks_like_qwen3vl_vision_golden(const SafeTensors& f);
// One line per check. Tolerances (rel-L2 against the f64 reference): f32 1e-5, f64 1e-6 (the reference rotates
// vision q/k in f32 even in its f64 run); pixel rows of unresized images 1e-12; positions and grids exact; the
// resized image of the "preproc" case 2e-2 (PIL's or torchvision's resampler against ours: +-1 level steps); bf16
// (GPU) 1.5x transformers' own bf16 error on each output (metadata reference_rel_l2_vs_f64). `device` Device::cuda
// runs both towers on the GPU (f32 or bf16); `tolerance` > 0 overrides the model outputs' bounds.
VerifyReport verify_qwen3vl_vision_file(const SafeTensors& f, Precision precision, Device device = Device::cpu,
                                        double tolerance = -1);

}  // namespace h3

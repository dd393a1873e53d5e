// `h3 verify` for the whole-chain golden sets (shared/golden/pipeline-t2va-*.safetensors): prompt embeddings
// and noise from the file, the weights from its sibling files (pipeline-t2va-X -> dit-X, video-vae-X,
// audio-vae-X in the same folder), the t2va loop (pipeline/sampling.h), and every per-step row tensor, the final
// latents, the pixels and the waveform compared with the reference.
//
// On more than one rank the DiT runs distributed over world() and both decodes are sharded; rank 0 then
// reruns the chain on one rank in-process and requires bitwise equality (ulysses, ulysses-ag) or rel-L2 <=
// 1e-6 (tensor, hybrid) for every compared tensor, so one command checks both the reference and the
// rank-count independence.
#pragma once
#include <optional>
#include <string>

#include "io/safetensors.h"
#include "model/dit/dit.h"
#include "verify/dit.h"

namespace h3 {

struct PipelineVerifyOptions {
  // CPU: f32 or f64. GPU (device cuda): bf16 (the DiT in bf16 on the GPU, the video VAE decoder in bf16, the audio
  // decoder in f32) or f32 (the DiT on the CPU, which is the only f32 DiT, the VAE decoders in f32 on the GPU).
  Precision precision = Precision::f32;
  Device device = Device::cpu;
  std::optional<DistOptions> dist;  // run over world() with these options
  // Overrides the defaults: f32 1e-5, f64 1e-6 (the reference is stored in f32); bf16 the parts' own bounds: the rows
  // and latents 1.5x the reference DiT's bf16 error (its golden file's metadata), the pixels that plus the video
  // VAE's bf16 bound (1e-2), the waveform that plus the audio decoder's f32 bound (1e-5).
  std::optional<double> tolerance;
  std::string dit_weights;  // overrides the sibling DiT file
};

bool looks_like_pipeline_golden(const SafeTensors& f);
// Every rank must call it (collective when world() has more than one rank); the report is complete on rank 0.
VerifyReport verify_pipeline_file(const SafeTensors& f, const PipelineVerifyOptions& opt);
// Sibling file of a pipeline set: component "dit", "video-vae" or "audio-vae". Throws naming the path looked
// for.
std::string pipeline_sibling(const SafeTensors& f, const std::string& component);

}  // namespace h3

// `h3 verify` for the video and audio VAE golden files (shared/golden/{video,audio}-vae-mini.safetensors): runs every
// case of the file (decode and encode) in the requested precision and compares with the reference's outputs.
#pragma once
#include "distributed/comm.h"
#include "io/safetensors.h"
#include "model/dit/dit.h"
#include "verify/dit.h"

namespace h3 {

bool looks_like_video_vae_golden(const SafeTensors& f);
bool looks_like_audio_vae_golden(const SafeTensors& f);
// Tolerances on rel-L2 against the f64 reference: 1e-9 (f64), 1e-5 (f32), 1e-2 (bf16, GPU only: a stated bound,
// the line prints the error reached). A reference stored as f32 is compared with the engine's f64 output rounded
// to f32 (the line says so), since the storage rounding alone is ~1e-8.
// With `comm` (more than one rank) the decode cases run sharded over it (model/vae/shard.h) and every rank must
// make the same call; encode cases run whole on every rank. Every rank gets the same report.
// device cuda: the decoders run on the GPU (f32 or bf16); the encode cases still run on the CPU in f32.
VerifyReport verify_video_vae_file(const SafeTensors& f, Precision precision, Comm* comm = nullptr,
                                   Device device = Device::cpu);
VerifyReport verify_audio_vae_file(const SafeTensors& f, Precision precision, Comm* comm = nullptr,
                                   Device device = Device::cpu);

double vae_tolerance(Precision precision);

}  // namespace h3

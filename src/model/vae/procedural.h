// Procedural video and audio VAEs (encoders and decoders) at the released strides (16x spatial, 4x temporal, 800
// samples per audio latent at 32 kHz) but tiny widths, so `h3 generate` and the decode benchmarks run with no
// download. Weights follow the procedural formula of shared/golden/README.md (io/procedural.h); BigVGAN's fixed
// anti-aliasing filters take their real values. The pictures and sound are meaningless.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"

namespace h3 {

VideoVaeConfig procedural_video_vae_config();
AudioVaeConfig procedural_audio_vae_config();

// Parameter lists (keys and shapes) of the decode-only VAEs.
std::vector<std::pair<std::string, Shape>> video_vae_decoder_parameters(const VideoVaeConfig& c);
std::vector<std::pair<std::string, Shape>> audio_vae_decoder_parameters(const AudioVaeConfig& c);
// The encoders (fl2va / ref2va conditions): the CNN video encoder + quant_conv, the DAC audio encoder + its
// causal-attention projection and mean_proj.
std::vector<std::pair<std::string, Shape>> video_vae_encoder_parameters(const VideoVaeConfig& c);
std::vector<std::pair<std::string, Shape>> audio_vae_encoder_parameters(const AudioVaeConfig& c);

// A mapped procedural file of VAE parameters (io/procedural.h: procedural_safetensors), with the fixed filters.
std::shared_ptr<SafeTensors> procedural_vae_file(const std::vector<std::pair<std::string, Shape>>& params,
                                                 uint64_t seed, const std::string& label);
// The mini VAEs, encoder and decoder.
std::shared_ptr<SafeTensors> procedural_video_vae_file(uint64_t seed);
std::shared_ptr<SafeTensors> procedural_audio_vae_file(uint64_t seed);

}  // namespace h3

// Procedural video and audio VAEs (encoders and decoders), so `h3 generate` and the decode benchmarks run with no
// download: "mini" at the released strides (16x spatial, 4x temporal, 800 samples per audio latent at 32 kHz) but
// tiny widths, "full" at the released configuration (h3-model-spec §6-7: VideoVaeConfig{}, AudioVaeConfig{}).
// Weights follow the procedural formula of shared/golden/README.md (io/procedural.h) and are made where the VAE
// runs (a GPU VAE's decoder on the GPU: no host copy, no file); BigVGAN's fixed anti-aliasing filters take their
// real values. The pictures and sound are meaningless.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/procedural.h"
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

// Procedural weights of a VAE of config `c` as a TensorSource (decoder, plus the encoder when `encoder`), with the
// fixed filters; nothing is generated until the VAE reads it.
std::shared_ptr<ProceduralWeights> procedural_video_vae_weights(const VideoVaeConfig& c, uint64_t seed, bool encoder,
                                                                const std::string& label);
std::shared_ptr<ProceduralWeights> procedural_audio_vae_weights(const AudioVaeConfig& c, uint64_t seed, bool encoder,
                                                                const std::string& label);
// The configs by procedural name: "mini" (above) or "full" (the released ones).
VideoVaeConfig procedural_video_vae_config(const std::string& name);
AudioVaeConfig procedural_audio_vae_config(const std::string& name);
// The VAE of a spec "procedural:mini|full[:seed=N]" (`what` names the flag in errors), encoder included, its weights
// made where it runs (io/procedural.h: ProceduralWeights).
std::unique_ptr<VideoVae> procedural_video_vae(const std::string& spec, Precision precision, Device device,
                                               const char* what = "--video-vae");
std::unique_ptr<AudioVae> procedural_audio_vae(const std::string& spec, Precision precision, Device device,
                                               const char* what = "--audio-vae");
// procedural:full by seed: the released video VAE (36-layer ViT decoder of width 2048, CNN encoder) and audio VAE
// (BigVGAN decoder of width 1024, DAC encoder).
std::unique_ptr<VideoVae> procedural_video_vae_full(uint64_t seed, Precision precision, Device device);
std::unique_ptr<AudioVae> procedural_audio_vae_full(uint64_t seed, Precision precision, Device device);

}  // namespace h3

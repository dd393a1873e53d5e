// Procedural stand-ins for every component of the t2va pipeline, so `h3 generate` runs with no download: the
// mini DiT (procedural:mini), a video VAE and an audio VAE (encoders and decoders) at the released strides
// (16x spatial, 4x temporal, 800 samples per audio latent at 32 kHz) but tiny widths, a 50-layer Qwen3 text
// tower of width 64 (the mini DiT's text_dim) with a 3-block Qwen3-VL vision tower beside it (width 32, the
// released patch/merge sizes, DeepStack into LM layers 0-2), and a byte-level tokenizer (256 ids, one per
// byte, no merges, plus Qwen's four vision tokens at 256..259). Weights follow the procedural formula of
// shared/golden/README.md (io/procedural.h). The pictures and sound are meaningless: only the released
// weights make sense of a prompt.
//
// The components load through the same classes as real checkpoints: their tensors are written once to a
// temporary safetensors file that is memory-mapped and unlinked at once (nothing is left on disk).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "model/audio_vae.h"
#include "model/qwen3_text.h"
#include "model/qwen3_vision.h"
#include "model/video_vae.h"

namespace h3 {

inline constexpr const char* kProceduralMini = "procedural:mini";

VideoVaeConfig procedural_video_vae_config();
AudioVaeConfig procedural_audio_vae_config();
QwenTextConfig procedural_qwen_text_config();
QwenVisionConfig procedural_qwen_vision_config();

// Parameter lists (keys and shapes) of the decode-only VAEs and of the text tower's first `layers` layers.
std::vector<std::pair<std::string, Shape>> video_vae_decoder_parameters(const VideoVaeConfig& c);
std::vector<std::pair<std::string, Shape>> audio_vae_decoder_parameters(const AudioVaeConfig& c);
std::vector<std::pair<std::string, Shape>> qwen_text_parameters(const QwenTextConfig& c);
// The vision tower's keys under `prefix` ("visual." as in Qwen3-VL checkpoints).
std::vector<std::pair<std::string, Shape>> qwen_vision_parameters(const QwenVisionConfig& c,
                                                                  const std::string& prefix);
// The encoders (fl2va / ref2va conditions): the CNN video encoder + quant_conv, the DAC audio encoder + its
// causal-attention projection and mean_proj.
std::vector<std::pair<std::string, Shape>> video_vae_encoder_parameters(const VideoVaeConfig& c);
std::vector<std::pair<std::string, Shape>> audio_vae_encoder_parameters(const AudioVaeConfig& c);

// A memory-mapped file holding procedural tensors for `params` (name = key) and `metadata`; the file is
// unlinked once mapped. `label` names it in logs.
std::shared_ptr<SafeTensors> procedural_safetensors(const std::vector<std::pair<std::string, Shape>>& params,
                                                    const std::map<std::string, std::string>& metadata,
                                                    uint64_t seed, const std::string& label);

// "procedural:mini[:seed=N]" for a component: checks the name (only mini exists; `what` names the flag in the
// error) and returns the seed (the default seed when none is given).
uint64_t procedural_mini_seed(const std::string& spec, const char* what);

std::shared_ptr<SafeTensors> procedural_video_vae_file(uint64_t seed);
std::shared_ptr<SafeTensors> procedural_audio_vae_file(uint64_t seed);
std::shared_ptr<SafeTensors> procedural_qwen_text_file(uint64_t seed);
// tokenizer.json text of the built-in byte-level tokenizer (Qwen2 format, read by model/tokenizer.h).
std::string builtin_tokenizer_json();

}  // namespace h3

// The VAEs by path, for every command: a .safetensors file (config in its "config" metadata, video tiling in its
// "tiling" metadata, golden files' "weight." prefix detected), a diffusers folder (config.json with one file, or a
// *.safetensors.index.json and its shards: io/weight_files.h), or "procedural:mini|full[:seed=N]"
// (model/vae/procedural.h).
#pragma once
#include <memory>
#include <string>

#include "io/tensor_source.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"

namespace h3 {

// A VAE checkpoint before its weights are read.
struct VaeCheckpoint {
  std::shared_ptr<const TensorSource> weights;
  std::string prefix;       // "weight." in golden files, else ""
  std::string config_json;  // config.json, else the file's "config" metadata ("" for procedural)
  std::string tiling_json;  // the video VAE's "tiling" metadata
};
// `what` names the flag in errors ("--video-vae").
VaeCheckpoint open_video_vae_checkpoint(const std::string& path, const char* what = "--video-vae");
VaeCheckpoint open_audio_vae_checkpoint(const std::string& path, const char* what = "--audio-vae");
// The configuration alone (procedural: the mini or released one), reading only headers.
VideoVaeConfig video_vae_config_of(const std::string& path, const char* what = "--video-vae");

std::unique_ptr<VideoVae> open_video_vae(const std::string& path, Precision precision, Device device,
                                         const char* what = "--video-vae");
std::unique_ptr<AudioVae> open_audio_vae(const std::string& path, Precision precision, Device device,
                                         const char* what = "--audio-vae");

}  // namespace h3

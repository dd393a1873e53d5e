#include "model/vae/open.h"

#include "core/error.h"
#include "io/procedural.h"
#include "io/weight_files.h"
#include "model/vae/procedural.h"

namespace h3 {

namespace {

VaeCheckpoint open_checkpoint(const std::string& path, const char* what, const char* golden_key) {
  VaeCheckpoint c;
  auto w = WeightFiles::open(path, what);
  c.prefix = w->has(golden_key) ? "weight." : "";
  c.config_json = w->config_json();
  if (c.config_json.empty()) c.config_json = w->meta("config");
  c.tiling_json = w->meta("tiling");
  c.weights = std::move(w);
  return c;
}

}  // namespace

VaeCheckpoint open_video_vae_checkpoint(const std::string& path, const char* what) {
  return open_checkpoint(path, what, "weight.post_quant_conv.weight");
}

VaeCheckpoint open_audio_vae_checkpoint(const std::string& path, const char* what) {
  return open_checkpoint(path, what, "weight.dec_in_proj.weight");
}

VideoVaeConfig video_vae_config_of(const std::string& path, const char* what) {
  if (path.starts_with("procedural:"))
    return procedural_video_vae_config(parse_procedural_spec(path, what, {"mini", "full"}).name);
  const VaeCheckpoint c = open_video_vae_checkpoint(path, what);
  return VideoVaeConfig::from_json_text(c.config_json, c.tiling_json, path);
}

std::unique_ptr<VideoVae> open_video_vae(const std::string& path, Precision precision, Device device,
                                         const char* what) {
  if (path.starts_with("procedural:")) return procedural_video_vae(path, precision, device, what);
  const VaeCheckpoint c = open_video_vae_checkpoint(path, what);
  return std::make_unique<VideoVae>(
      *c.weights, c.prefix, VideoVaeConfig::from_json_text(c.config_json, c.tiling_json, path), precision, device);
}

std::unique_ptr<AudioVae> open_audio_vae(const std::string& path, Precision precision, Device device,
                                         const char* what) {
  if (path.starts_with("procedural:")) return procedural_audio_vae(path, precision, device, what);
  const VaeCheckpoint c = open_audio_vae_checkpoint(path, what);
  const AudioVaeConfig cfg =
      c.config_json.empty() ? AudioVaeConfig{} : AudioVaeConfig::from_json_text(c.config_json, path);
  return std::make_unique<AudioVae>(*c.weights, c.prefix, cfg, precision, device);
}

}  // namespace h3

// The components a ModelPaths names, opened without loading any weights: which file (or procedural model) each one
// is, its config, the tokenizer, the request rules the models accept and one line per component for the log. The
// Generator loads the models from these when and where its memory plan says, as often as the plan needs.
//
// Procedural components: "procedural:mini[:seed=N]" (tiny widths, every component) and "procedural:full[:seed=N]"
// (the released shapes, every component's weights generated where it runs: on the device for the GPU models). A
// model folder "procedural:NAME" makes every component that procedural model.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/dit/config.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/tokenizer.h"
#include "model/qwen3vl/weights.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"
#include "pipeline/generator.h"
#include "pipeline/request.h"

namespace h3 {

struct ModelSources {
  std::string dit_path, vvae_path, avae_path, text_path, tok_path;
  DitConfig dit_config;
  int64_t dit_file_bytes = 0;  // stored bytes of a checkpoint file (0: procedural)

  // The VAEs are opened where and when they are loaded (model/vae/open.h: a file, a sharded folder or a procedural
  // model, whose weights are generated where the VAE runs); here only their configs.
  VideoVaeConfig vvae_config;
  AudioVaeConfig avae_config;
  int64_t vvae_file_bytes = 0, avae_file_bytes = 0;  // 0: procedural

  std::shared_ptr<Qwen3VlTextWeights> text_weights;
  Qwen3VlTextConfig text_config;
  std::string text_problem;  // why the text tower cannot feed this DiT ("" = fine)
  bool text_procedural = false;

  std::shared_ptr<const Tokenizer> tokenizer;
  ModelLimits limits;
  std::vector<std::string> described;  // one line per component
  bool any_procedural = false;
};

// Opens every component (headers, configs and the tokenizer only) and checks that they fit together (latent
// channels, text width, VAE time compression). Throws h3::Error naming the files.
ModelSources open_model_sources(const ModelPaths& paths);
// The request rules of `paths` reading at most the video VAE's config.
ModelLimits model_limits_for(const ModelPaths& paths);

// Loads a VAE from its source in `precision` on `device` (the decoder's weights go to the GPU; the encoder stays on
// the CPU), reading its weights (or generating them) now.
std::unique_ptr<VideoVae> load_video_vae(const ModelSources& s, Precision precision, Device device);
std::unique_ptr<AudioVae> load_audio_vae(const ModelSources& s, Precision precision, Device device);
// Stored bytes of the text tower's first `layers` decoder layers and embeddings (what a load reads).
int64_t text_file_bytes(const ModelSources& s, int64_t layers);

}  // namespace h3

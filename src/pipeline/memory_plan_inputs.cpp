#include "pipeline/memory_plan_inputs.h"

#include <algorithm>
#include <tuple>

#include "model/dit/layout.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/vision.h"
#include "pipeline/conditions.h"

namespace h3 {

namespace {

constexpr int64_t kTextLayersUsed = 50;  // H3 conditions on the text tower's hidden_states[50]

// The DiT mesh (K tensor-parallel, U sequence-parallel) of n denoise ranks, as DistPlan::make builds it.
std::pair<int, int> mesh_of(const DistOptions& d, int n) {
  if (d.mode == DistMode::tensor) return {n, 1};
  if (d.mode == DistMode::hybrid) return {d.tp, std::max(1, n / std::max(1, d.tp))};
  return {1, n};
}

}  // namespace

MemoryPlanInputs memory_plan_inputs(const ModelSources& s, const GenerateOptions& o, const ResolvedRequest& r,
                                    int world, int64_t device_bytes) {
  MemoryPlanInputs in;
  in.dit = s.dit_config;
  in.dit_on_gpu = o.device == Device::cuda && (o.precision == Precision::bf16 || o.precision == Precision::fp8);
  in.dit_precision = o.precision;
  in.mode = o.dist.mode;
  const int denoise = world - o.encoder_ranks;
  std::tie(in.K, in.U) = mesh_of(o.dist, std::max(denoise, 1));
  in.video_vae = s.vvae_config;
  in.audio_vae = s.avae_config;
  in.vae_on_gpu = o.device == Device::cuda && o.vae_precision != Precision::f64;
  in.vae_precision = o.vae_precision;
  in.text = s.text_config;
  in.text_layers = kTextLayersUsed;
  in.text_precision = o.text_precision;
  in.text_tp = static_cast<int>(
      std::min<int64_t>(o.encoder_ranks > 0 ? o.encoder_ranks : world, std::max<int64_t>(s.text_config.n_kv_heads, 1)));
  in.text_on_gpu = o.device == Device::cuda && o.text_device == Device::cuda && s.text_problem.empty();
  in.text_elsewhere = o.encoder_ranks > 0;
  // The vision tower (rank 0, beside the text tower) for requests with pictures or videos.
  bool visual = false;
  for (const ConditionMedia& c : r.media) visual |= c.visual();
  if (visual && in.text_on_gpu && has_qwen3vl_vision(*s.text_weights)) {
    const Qwen3VlVisionConfig vc = detect_qwen3vl_vision_config(*s.text_weights);
    for (const auto& [key, shape] : qwen3vl_vision_parameters(vc, ""))
      in.vision_bytes += shape_numel(shape) * (o.text_precision == Precision::bf16 ? 2 : 4);
  }
  // Prompt rows: the prompt's tokens and the chat template, and a vision row per 32 x 32 pixels of each picture.
  int64_t tokens = static_cast<int64_t>(s.tokenizer->encode(r.prompt).size()) + 64;
  for (const ConditionMedia& c : r.media)
    if (c.visual()) tokens += c.width * c.height / 1024 * std::max<int64_t>(1, c.frames / 2);
  in.text_tokens = tokens;
  in.seq_len = request_layout(r, text_tags_with_vision(tokens, {})).seq_len;
  in.latent_frames = r.latent_frames;
  in.latent_h = r.latent_h;
  in.latent_w = r.latent_w;
  in.audio_latents = r.audio_latents;
  in.dit_calls = r.model_calls;
  in.width = r.width;
  in.height = r.height;
  in.frames = r.frames;
  in.device_bytes = device_bytes;
  in.policy = o.memory;
  in.stream_layers = o.stream_layers;
  return in;
}

}  // namespace h3

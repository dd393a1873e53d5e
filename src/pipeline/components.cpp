#include "pipeline/components.h"

#include <filesystem>

#include "io/procedural.h"
#include "io/weight_files.h"
#include "model/dit/checkpoint.h"
#include "model/dit/layout.h"
#include "model/qwen3vl/procedural.h"
#include "model/vae/open.h"
#include "model/vae/procedural.h"
#include "pipeline/geometry.h"

namespace h3 {

namespace fs = std::filesystem;

namespace {

inline constexpr int64_t kConditioningLayer = 50;  // H3 conditions on hidden_states[50]

bool is_procedural(const std::string& p) {
  return p.starts_with("procedural:");
}

ProceduralSpec parse_procedural(const std::string& spec, const char* what) {
  return parse_procedural_spec(spec, what, {"mini", "full"});
}

// A component path: explicit, else the model folder's subfolder (or the folder's procedural name), else the
// procedural mini model.
std::string pick(const std::string& explicit_path, const std::string& model_dir,
                 std::initializer_list<const char*> subdirs) {
  if (!explicit_path.empty()) return explicit_path;
  if (is_procedural(model_dir)) return model_dir;
  if (!model_dir.empty()) {
    for (const char* s : subdirs)
      if (fs::exists(fs::path(model_dir) / s)) return (fs::path(model_dir) / s).string();
    std::string tried;
    for (const char* s : subdirs) tried += (tried.empty() ? "" : " or ") + (fs::path(model_dir) / s).string();
    fail("--model {}: no {} found; pass the component explicitly", model_dir, tried);
  }
  return kProceduralMini;
}

// The procedural mini VAEs have no trained resolution: references are encoded small (64 px short edge) so
// fl2va / ref2va runs on the CPU stay short. Real checkpoints keep the released sizes.
void use_procedural_reference_sizes(ModelLimits& lim) {
  lim.ref_image_short_edge = 64;
  lim.ref_video_short_edge = 64;
  lim.ref_video_max_pixels = 64 * 128;
}

int64_t file_bytes(const WeightFiles& f) {
  int64_t n = 0;
  for (const auto& k : f.keys()) n += static_cast<int64_t>(f.info(k).end - f.info(k).begin);
  return n;
}

}  // namespace

ModelLimits model_limits_for(const ModelPaths& paths) {
  ModelLimits lim;
  const std::string v = pick(paths.video_vae, paths.model_dir, {"vae", "video_vae"});
  if (is_procedural(v)) {  // the procedural VAEs have the released strides
    if (parse_procedural(v, "--video-vae").name == "mini") use_procedural_reference_sizes(lim);
    return lim;
  }
  const VideoVaeConfig cfg = video_vae_config_of(v);
  lim.vae_spatial_ratio = cfg.spatial_ratio();
  lim.canvas_multiple = lim.vae_spatial_ratio * kPatch;
  return lim;
}

ModelSources open_model_sources(const ModelPaths& paths) {
  ModelSources m;
  // DitCheckpoint::open understands the model folder (with its transformer/ subfolder) itself.
  m.dit_path = !paths.dit.empty() ? paths.dit : !paths.model_dir.empty() ? paths.model_dir : kProceduralMini;
  m.vvae_path = pick(paths.video_vae, paths.model_dir, {"vae", "video_vae"});
  m.avae_path = pick(paths.audio_vae, paths.model_dir, {"audio_vae"});
  m.text_path = pick(paths.text_encoder, paths.model_dir, {"text_encoder"});
  m.tok_path = !paths.tokenizer.empty()         ? paths.tokenizer
               : is_procedural(paths.model_dir) ? paths.model_dir
               : !paths.model_dir.empty() ? pick("", paths.model_dir, {"tokenizer/tokenizer.json", "tokenizer.json"})
                                          : kProceduralMini;

  // DiT: the header only (weights are loaded where and when the memory plan says).
  {
    const DitCheckpoint ck = DitCheckpoint::open(m.dit_path);
    m.dit_config = ck.config();
    m.any_procedural |= ck.layout() == DitLayout::procedural;
    m.dit_file_bytes = ck.layout() == DitLayout::procedural ? 0 : static_cast<int64_t>(ck.stored_bytes());
    m.described.push_back(fmt::format("dit          {}: {}", m.dit_path, ck.detection_summary()));
  }

  // VAEs: headers and configs only (a file, a folder with one file or an index and its shards, or
  // procedural:mini|full; model/vae/open.h).
  if (is_procedural(m.vvae_path)) {
    m.vvae_config = procedural_video_vae_config(parse_procedural(m.vvae_path, "--video-vae").name);
    m.any_procedural = true;
  } else {
    const VaeCheckpoint c = open_video_vae_checkpoint(m.vvae_path);
    m.vvae_config = VideoVaeConfig::from_json_text(c.config_json, c.tiling_json, m.vvae_path);
    m.vvae_file_bytes = file_bytes(dynamic_cast<const WeightFiles&>(*c.weights));
  }
  m.described.push_back(fmt::format("video VAE    {}: {}", m.vvae_path, m.vvae_config.summary()));
  if (is_procedural(m.avae_path)) {
    m.avae_config = procedural_audio_vae_config(parse_procedural(m.avae_path, "--audio-vae").name);
    m.any_procedural = true;
  } else {
    const VaeCheckpoint c = open_audio_vae_checkpoint(m.avae_path);
    m.avae_config =
        c.config_json.empty() ? AudioVaeConfig{} : AudioVaeConfig::from_json_text(c.config_json, m.avae_path);
    m.avae_file_bytes = file_bytes(dynamic_cast<const WeightFiles&>(*c.weights));
  }
  m.described.push_back(fmt::format("audio VAE    {}: {}", m.avae_path, m.avae_config.summary()));

  // The components must fit together.
  const DitConfig& dc = m.dit_config;
  H3_CHECK(m.vvae_config.latent_channels == dc.in_channels,
           "the video VAE has {} latent channels but the DiT expects {} ({} vs {}): pass matching "
           "--video-vae/--dit",
           m.vvae_config.latent_channels, dc.in_channels, m.vvae_path, m.dit_path);
  H3_CHECK(m.avae_config.latent_channels == dc.audio_in_channels,
           "the audio VAE has {} latent channels but the DiT expects {} ({} vs {}): pass matching "
           "--audio-vae/--dit",
           m.avae_config.latent_channels, dc.audio_in_channels, m.avae_path, m.dit_path);
  H3_CHECK(m.vvae_config.temporal_ratio() == 4 && m.vvae_config.clip_length == kFramesPerChunk,
           "{}: the video VAE compresses time by {} in clips of {} frames; the t2va frame rules need 4 and 17",
           m.vvae_path, m.vvae_config.temporal_ratio(), m.vvae_config.clip_length);
  m.limits.vae_spatial_ratio = m.vvae_config.spatial_ratio();
  m.limits.canvas_multiple = m.limits.vae_spatial_ratio * kPatch;
  m.limits.audio_hop = m.avae_config.hop();
  m.limits.audio_sample_rate = static_cast<int>(m.avae_config.sampling_rate);
  if (is_procedural(m.vvae_path) && parse_procedural(m.vvae_path, "--video-vae").name == "mini")
    use_procedural_reference_sizes(m.limits);

  // Text tower: only its header here (weights are loaded where and when they are used).
  // procedural:mini is a mapped file; procedural:full (Qwen3-VL-32B's towers) generates each tensor where it is loaded
  // (on the GPU for a GPU tower), so no host copy of the 25 B parameters is ever made (model/qwen3vl/procedural.h).
  if (is_procedural(m.text_path)) {
    m.text_weights = std::make_shared<Qwen3VlTextWeights>(procedural_qwen3vl(m.text_path, "--text-encoder"));
    m.text_procedural = true;
    m.any_procedural = true;
  } else {
    // A file, or a transformers folder (config.json + index + shards): only the text layers are read.
    m.text_weights = std::make_shared<Qwen3VlTextWeights>(Qwen3VlTextWeights::open(m.text_path));
  }
  m.text_config = detect_qwen3vl_text_config(*m.text_weights);
  if (m.text_config.hidden != dc.text_dim) {
    m.text_problem = fmt::format(
        "the text encoder ({}) is {} wide but the DiT reads {}-wide prompt embeddings: pass the matching "
        "--text-encoder (or --embeddings)",
        m.text_path, m.text_config.hidden, dc.text_dim);
  } else if (m.text_config.n_layers < kConditioningLayer) {
    m.text_problem = fmt::format("the text encoder ({}) has {} layers; H3 conditions on hidden state {}", m.text_path,
                                 m.text_config.n_layers, kConditioningLayer);
  }
  m.described.push_back(fmt::format("text encoder {}: {}{}", m.text_path, m.text_config.summary(),
                                    m.text_problem.empty() ? "" : " (UNUSABLE: " + m.text_problem + ")"));

  // Tokenizer (the encoding rank only needs it, but it is small and every rank validates the same file).
  if (is_procedural(m.tok_path)) {
    parse_procedural(m.tok_path, "--tokenizer");
    m.tokenizer = std::make_shared<const Tokenizer>(
        Tokenizer::from_json_text(builtin_tokenizer_json(), "built-in byte-level tokenizer"));
    m.any_procedural = true;
  } else {
    const std::string p =
        fs::is_directory(m.tok_path) ? (fs::path(m.tok_path) / "tokenizer.json").string() : m.tok_path;
    m.tokenizer = std::make_shared<const Tokenizer>(Tokenizer::from_file(p));
  }
  m.described.push_back(fmt::format("tokenizer    {}: {} ids", m.tok_path, m.tokenizer->vocab_size()));
  if (m.text_problem.empty() && static_cast<int64_t>(m.tokenizer->vocab_size()) > m.text_config.vocab_size)
    m.text_problem = fmt::format("the tokenizer ({}) has {} ids but the text encoder's vocabulary only {}", m.tok_path,
                                 m.tokenizer->vocab_size(), m.text_config.vocab_size);
  return m;
}

std::unique_ptr<VideoVae> load_video_vae(const ModelSources& s, Precision precision, Device device) {
  return open_video_vae(s.vvae_path, precision, device);
}

std::unique_ptr<AudioVae> load_audio_vae(const ModelSources& s, Precision precision, Device device) {
  return open_audio_vae(s.avae_path, precision, device);
}

int64_t text_file_bytes(const ModelSources& s, int64_t layers) {
  if (!s.text_weights || s.text_procedural) return 0;
  const std::string prefix = qwen3vl_text_prefix(*s.text_weights);
  int64_t n = 0;
  for (const auto& k : s.text_weights->keys()) {
    if (!k.starts_with(prefix)) continue;
    const std::string rest = k.substr(prefix.size());
    bool take = rest.starts_with("embed_tokens.");
    if (rest.starts_with("layers.")) take = std::stoll(rest.substr(7)) < layers;
    if (take) n += static_cast<int64_t>(s.text_weights->info(k).end - s.text_weights->info(k).begin);
  }
  return n;
}

}  // namespace h3

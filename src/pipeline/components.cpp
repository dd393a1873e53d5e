#include "pipeline/components.h"

#include <charconv>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "io/procedural.h"
#include "model/dit/checkpoint.h"
#include "model/dit/layout.h"
#include "model/qwen3vl/procedural.h"
#include "model/vae/procedural.h"
#include "pipeline/geometry.h"

namespace h3 {

namespace fs = std::filesystem;

namespace {

inline constexpr int64_t kConditioningLayer = 50;  // H3 conditions on hidden_states[50]

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  H3_CHECK(in.good(), "cannot read {} {}", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool is_procedural(const std::string& p) {
  return p.starts_with("procedural:");
}

// "procedural:NAME[:seed=N]" -> NAME and the seed.
struct ProceduralSpec {
  std::string name;
  uint64_t seed = kDefaultProceduralSeed;
};
ProceduralSpec parse_procedural(const std::string& spec, const char* what) {
  ProceduralSpec p;
  std::string rest = spec.substr(11);
  if (const auto k = rest.find(":seed="); k != std::string::npos) {
    const std::string s = rest.substr(k + 6);
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), p.seed);
    H3_CHECK(!s.empty() && ec == std::errc() && end == s.data() + s.size(),
             "{} '{}': the seed after ':seed=' is not a non-negative integer", what, spec);
    rest = rest.substr(0, k);
  }
  H3_CHECK(rest == "mini" || rest == "full", "{} '{}': procedural models are procedural:mini and procedural:full", what,
           spec);
  p.name = rest;
  return p;
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

// A safetensors component given as a file or a folder holding exactly one *.safetensors (plus config.json).
struct ComponentFile {
  std::shared_ptr<SafeTensors> file;
  std::string config_json;  // folder config.json, or the file's "config" metadata
  std::string extra_json;   // video VAE tiling metadata
};

ComponentFile open_component(const std::string& path, const char* what) {
  ComponentFile c;
  if (fs::is_directory(path)) {
    std::vector<fs::path> files;
    for (const auto& e : fs::directory_iterator(path))
      if (e.path().extension() == ".safetensors") files.push_back(e.path());
    H3_CHECK(files.size() == 1,
             "{} folder {} holds {} .safetensors files; this version reads exactly one (merge shards with h3 "
             "convert or pass the file)",
             what, path, files.size());
    c.file = std::make_shared<SafeTensors>(SafeTensors::open(files[0].string()));
    const fs::path cfg = fs::path(path) / "config.json";
    if (fs::exists(cfg)) c.config_json = read_text_file(cfg.string(), std::string(what) + " config");
  } else {
    H3_CHECK(fs::exists(path), "{} {} does not exist", what, path);
    c.file = std::make_shared<SafeTensors>(SafeTensors::open(path));
  }
  if (c.config_json.empty()) c.config_json = c.file->meta("config");
  c.extra_json = c.file->meta("tiling");
  return c;
}

int64_t file_bytes(const SafeTensors& f) {
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
  ComponentFile c = open_component(v, "video VAE");
  const VideoVaeConfig cfg = VideoVaeConfig::from_json_text(c.config_json, c.extra_json, v);
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

  // Video VAE. procedural:full: the released decoder (no encoder), generated into a mapped file.
  if (is_procedural(m.vvae_path)) {
    const ProceduralSpec p = parse_procedural(m.vvae_path, "--video-vae");
    if (p.name == "mini") {
      m.vvae_config = procedural_video_vae_config();
      m.make_vvae_file = [seed = p.seed] { return procedural_video_vae_file(seed); };
    } else {
      m.vvae_config = VideoVaeConfig{};
      m.make_vvae_file = [seed = p.seed, c = m.vvae_config] {
        return procedural_vae_file(video_vae_decoder_parameters(c), seed, "procedural-full-video-vae");
      };
    }
    m.any_procedural = true;
  } else {
    ComponentFile c = open_component(m.vvae_path, "video VAE");
    m.vvae_file = c.file;
    m.vvae_config = VideoVaeConfig::from_json_text(c.config_json, c.extra_json, m.vvae_path);
    m.vvae_prefix = c.file->has("weight.post_quant_conv.weight") ? "weight." : "";
    m.vvae_file_bytes = file_bytes(*c.file);
  }
  m.described.push_back(fmt::format("video VAE    {}: {}", m.vvae_path, m.vvae_config.summary()));

  // Audio VAE.
  if (is_procedural(m.avae_path)) {
    const ProceduralSpec p = parse_procedural(m.avae_path, "--audio-vae");
    if (p.name == "mini") {
      m.avae_config = procedural_audio_vae_config();
      m.make_avae_file = [seed = p.seed] { return procedural_audio_vae_file(seed); };
    } else {
      m.avae_config = AudioVaeConfig{};
      m.make_avae_file = [seed = p.seed, c = m.avae_config] {
        return procedural_vae_file(audio_vae_decoder_parameters(c), seed, "procedural-full-audio-vae");
      };
    }
    m.any_procedural = true;
  } else {
    ComponentFile c = open_component(m.avae_path, "audio VAE");
    m.avae_file = c.file;
    m.avae_config =
        c.config_json.empty() ? AudioVaeConfig{} : AudioVaeConfig::from_json_text(c.config_json, m.avae_path);
    m.avae_prefix = c.file->has("weight.dec_in_proj.weight") ? "weight." : "";
    m.avae_file_bytes = file_bytes(*c.file);
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
  if (is_procedural(m.text_path)) {
    const ProceduralSpec p = parse_procedural(m.text_path, "--text-encoder");
    m.text_procedural = true;
    m.any_procedural = true;
    if (p.name == "mini") {
      m.text_weights = std::make_shared<QwenTextWeights>(QwenTextWeights::from_file(procedural_qwen_text_file(p.seed)));
    } else {
      m.text_config = QwenTextConfig{};
      m.text_config.n_layers = kConditioningLayer;
      m.text_problem = fmt::format(
          "the text encoder {} (the full-size Qwen3-VL tower generated on the device) is not in this build yet: "
          "give precomputed prompt embeddings (--embeddings) or a real --text-encoder",
          m.text_path);
    }
  } else {
    // A file, or a transformers folder (config.json + index + shards): only the text layers are read.
    m.text_weights = std::make_shared<QwenTextWeights>(QwenTextWeights::open(m.text_path));
  }
  if (m.text_weights) m.text_config = detect_qwen_text_config(*m.text_weights);
  if (!m.text_problem.empty()) {
  } else if (m.text_config.hidden != dc.text_dim) {
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
  if (!s.vvae_file) s.vvae_file = s.make_vvae_file();
  return std::make_unique<VideoVae>(*s.vvae_file, s.vvae_prefix, s.vvae_config, precision, device);
}

std::unique_ptr<AudioVae> load_audio_vae(const ModelSources& s, Precision precision, Device device) {
  if (!s.avae_file) s.avae_file = s.make_avae_file();
  return std::make_unique<AudioVae>(*s.avae_file, s.avae_prefix, s.avae_config, precision, device);
}

int64_t text_file_bytes(const ModelSources& s, int64_t layers) {
  if (!s.text_weights || s.text_procedural) return 0;
  const std::string prefix = qwen_text_prefix(*s.text_weights);
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

// Generator: models loaded once, requests run many times (pipeline/generator.h).
//
// Rank roles inside the group `comm` (size n, encoder ranks K):
//   K = 0: every rank denoises; for each request every rank also loads its slice of the text tower, which runs
//          tensor-parallel over the whole group (model/qwen3vl/text.h: KV-head units, ranks beyond the KV head
//          count hold nothing and receive the output), and frees it before denoising. Every rank ends the
//          encode with the embeddings, so nothing is broadcast.
//   K > 0: ranks [0, n-K) denoise, ranks [n-K, n) keep the text tower loaded, tensor-parallel among them;
//          rank n-K broadcasts the embeddings [L, text_dim] (L first, as one i64). Rank 0 of the group is
//          always a denoise rank, so progress and cancellation live there; the encoder ranks follow the per-step
//          control word and receive the final rows by broadcast before the decode.
// The tower's fold order does not depend on its rank count, so the embeddings (and the latents) are bitwise the
// same for every n and K.
// Every rank decodes (units sharded over the whole group) and ends with the same latents and media; rank 0
// writes.
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/log.h"
#include "dist/control.h"
#include "io/procedural.h"
#include "media/mp4_writer.h"
#include "model/dit/checkpoint.h"
#include "model/dit/lora.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/tokenizer.h"
#include "model/qwen3vl/vision.h"
#include "model/vae/audio_vae.h"
#include "model/vae/procedural.h"
#include "model/vae/video_vae.h"
#include "pipeline/conditions.h"
#include "pipeline/generator.h"
#include "pipeline/sampling.h"
#include "pipeline/synthetic.h"

namespace h3 {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline constexpr int64_t kConditioningLayer = 50;  // H3 conditions on hidden_states[50]

std::string procedural_models_notice() {
  return "NOTE: running on procedural (random) mini models: the pictures and the sound are meaningless "
         "noise. "
         "For real videos download the released MiniMax-H3 weights and pass --model DIR (the diffusers "
         "folder "
         "with transformer/, vae/, audio_vae/, text_encoder/, tokenizer/), or the components with --dit, "
         "--video-vae, --audio-vae, --text-encoder and --tokenizer.";
}

namespace {

int64_t count_non_finite(const Tensor& t) {
  if (!t.defined() || t.numel() == 0) return 0;
  const Tensor f = t.dtype() == DType::f64 ? t : t.to(DType::f32);
  int64_t n = 0;
  if (f.dtype() == DType::f64) {
    const double* p = f.data<double>();
    for (int64_t i = 0; i < f.numel(); ++i) n += std::isfinite(p[i]) ? 0 : 1;
  } else {
    const float* p = f.data<float>();
    for (int64_t i = 0; i < f.numel(); ++i) n += std::isfinite(p[i]) ? 0 : 1;
  }
  return n;
}

using clock_type = std::chrono::steady_clock;
double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

std::string read_text_file(const std::string& path, const std::string& what) {
  std::ifstream in(path, std::ios::binary);
  H3_CHECK(in.good(), "cannot read {} {}", what, path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// A component path: explicit, else the first existing subfolder of model_dir, else procedural.
std::string pick(const std::string& explicit_path, const std::string& model_dir,
                 std::initializer_list<const char*> subdirs) {
  if (!explicit_path.empty()) return explicit_path;
  if (!model_dir.empty()) {
    for (const char* s : subdirs)
      if (fs::exists(fs::path(model_dir) / s)) return (fs::path(model_dir) / s).string();
    std::string tried;
    for (const char* s : subdirs) tried += (tried.empty() ? "" : " or ") + (fs::path(model_dir) / s).string();
    fail("--model {}: no {} found; pass the component explicitly", model_dir, tried);
  }
  return kProceduralMini;
}

bool is_procedural(const std::string& p) {
  return p.starts_with("procedural:");
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

void bcast_tensor(Comm& comm, Tensor& t, int root, const std::string& what) {
  // Shape travels first (ndim, dims), then the bytes; every rank ends with an f32 tensor.
  int64_t hdr[9] = {0};
  if (comm.rank() == root) {
    H3_CHECK(t.ndim() <= 8, "{}: too many dimensions", what);
    hdr[0] = t.ndim();
    for (int i = 0; i < t.ndim(); ++i) hdr[1 + i] = t.dim(i);
  }
  comm.broadcast(hdr, sizeof(hdr), root, what + " (shape)");
  Shape s(hdr + 1, hdr + 1 + hdr[0]);
  if (comm.rank() == root)
    t = t.to(DType::f32);
  else
    t = Tensor(DType::f32, s);
  comm.broadcast(t.raw(), static_cast<int64_t>(t.nbytes()), root, what);
}

std::string bcast_string(Comm& comm, const std::string& s, int root, const std::string& what) {
  int64_t n = static_cast<int64_t>(s.size());
  comm.broadcast(&n, sizeof(n), root, what + " (length)");
  std::string out = comm.rank() == root ? s : std::string(static_cast<size_t>(n), '\0');
  if (n > 0) comm.broadcast(out.data(), n, root, what);
  return out;
}

// A tensor with its dtype kept (bcast_tensor above sends f32): the vision rows of an f64 run stay f64.
void bcast_tensor_as_is(Comm& comm, Tensor& t, int root, const std::string& what) {
  int64_t hdr[10] = {0};
  if (comm.rank() == root) {
    H3_CHECK(t.ndim() <= 8, "{}: too many dimensions", what);
    hdr[0] = t.defined() ? static_cast<int64_t>(t.dtype()) : -1;
    hdr[1] = t.defined() ? t.ndim() : 0;
    for (int i = 0; t.defined() && i < t.ndim(); ++i) hdr[2 + i] = t.dim(i);
  }
  comm.broadcast(hdr, sizeof(hdr), root, what + " (shape)");
  if (hdr[0] < 0) {
    t = Tensor();
    return;
  }
  if (comm.rank() != root) t = Tensor(static_cast<DType>(hdr[0]), Shape(hdr + 2, hdr + 2 + hdr[1]));
  if (t.nbytes() > 0) comm.broadcast(t.raw(), static_cast<int64_t>(t.nbytes()), root, what);
}

// The prepared prompt (PromptInputs) from `root` to every rank of `comm`.
void bcast_prompt(Comm& comm, PromptInputs& p, int root) {
  const bool me = comm.rank() == root;
  std::string head;
  if (me)
    head = json{{"ids", p.ids},
                {"positions", p.positions},
                {"rows", p.extras.rows},
                {"deepstack", p.extras.deepstack.size()},
                {"vision_ranges", p.vision_ranges},
                {"text", p.text}}
               .dump(-1, ' ', false, json::error_handler_t::replace);
  head = bcast_string(comm, head, root, "prompt tokens");
  if (!me) {
    const json j = json::parse(head);
    p.ids = j.at("ids").get<std::vector<int32_t>>();
    p.positions = j.at("positions").get<std::vector<int64_t>>();
    p.extras.rows = j.at("rows").get<std::vector<int64_t>>();
    p.extras.deepstack.assign(j.at("deepstack").get<size_t>(), Tensor());
    p.vision_ranges = j.at("vision_ranges").get<std::vector<std::pair<int64_t, int64_t>>>();
    p.text = j.at("text").get<std::string>();
  }
  if (p.extras.rows.empty()) return;
  bcast_tensor_as_is(comm, p.extras.embeds, root, "vision rows");
  for (size_t k = 0; k < p.extras.deepstack.size(); ++k)
    bcast_tensor_as_is(comm, p.extras.deepstack[k], root, fmt::format("DeepStack features {}", k));
}

}  // namespace

struct Generator::Impl {
  GenerateOptions opt;
  Comm* comm = nullptr;
  std::unique_ptr<Comm> role_comm;  // the denoise ranks (or the encoder ranks) of `comm`
  bool denoiser = true, encoder = false;
  int encoder_root = 0;  // rank of `comm` that encodes

  std::string dit_path, vvae_path, avae_path, text_path, tok_path;
  DitConfig dit_config;
  std::unique_ptr<DitCheckpoint> ckpt;
  DistPlan plan;
  std::unique_ptr<DitModel> dit;
  // The LoRAs merged into `dit` (its checkpoint). A request with another set re-opens the checkpoint (the
  // pristine, memory-mapped weights) and re-merges, so deltas never accumulate. `dit` is null after a failed
  // switch, which forces the next request to rebuild.
  std::vector<GenerateRequest::LoraRef> loras_merged;
  uint64_t lora_digest = 0;
  std::shared_ptr<SafeTensors> vvae_file, avae_file;
  std::shared_ptr<Qwen3VlTextWeights> text_weights;
  std::unique_ptr<VideoVae> vvae;
  std::unique_ptr<AudioVae> avae;
  Qwen3VlTextConfig text_cfg;
  std::string text_cfg_problem;            // why the text tower cannot feed this DiT ("" = fine)
  std::unique_ptr<Qwen3VlTextModel> text;  // kept only on dedicated encoder ranks
  std::unique_ptr<Tokenizer> tokenizer;
  ModelLimits limits;
  std::vector<std::string> described;
  bool any_procedural = false;
  double load_s = 0;
  bool first_run = true;

  Precision vae_precision() const { return opt.precision == Precision::f64 ? Precision::f64 : Precision::f32; }
  Device vae_device() const { return vae_precision() == Precision::f64 ? Device::cpu : opt.vae_device; }

  // The prompt of `r` (rank 0): the vision tower is loaded for requests with pictures or videos and freed
  // when the prompt is built (it is small next to the LM; its rows are all the LM needs).
  PromptInputs prepare_prompt(const ResolvedRequest& r) const {
    bool visual = false;
    for (const ConditionMedia& c : r.media) visual |= c.visual();
    if (!visual) return h3::prepare_prompt(r, *tokenizer, nullptr);
    H3_CHECK(has_qwen3vl_vision(*text_weights),
             "{} with pictures or videos needs Qwen3-VL's vision tower, but the text encoder {} holds none (no "
             "'*patch_embed.proj.weight'; e.g. a text-only truncated encoder): pass the full Qwen3-VL "
             "text_encoder folder with --text-encoder",
             r.mode, text_path);
    const Qwen3VlVisionConfig vc = detect_qwen3vl_vision_config(*text_weights);
    H3_CHECK(vc.out_hidden == text_cfg.hidden,
             "the vision tower in {} gives {}-wide rows but its text decoder is {} wide: the file mixes models",
             text_path, vc.out_hidden, text_cfg.hidden);
    const Qwen3VlVisionModel vision(*text_weights, vc, vae_precision());
    return h3::prepare_prompt(r, *tokenizer, &vision);
  }

  // Collective over the denoise ranks (DitModel checks that every rank merged the same LoRAs).
  void merge_loras(const std::vector<GenerateRequest::LoraRef>& want, int world_rank) {
    dit.reset();  // free the old weights before the new ones are built
    loras_merged.clear();
    lora_digest = 0;
    auto ck = std::make_unique<DitCheckpoint>(DitCheckpoint::open(dit_path));
    std::vector<std::string> specs;
    for (const auto& l : want) specs.push_back(fmt::format("{}:{}", l.path, l.strength));
    add_loras(*ck, specs, world_rank);
    dit = std::make_unique<DitModel>(*ck, opt.precision, plan);
    ckpt = std::move(ck);
    loras_merged = want;
    lora_digest = want.empty() ? 0 : ckpt->lora_digest();
  }

  // Collective over `tp` (null: this rank alone).
  std::unique_ptr<Qwen3VlTextModel> load_text(Comm* tp) const {
    H3_CHECK(text_cfg_problem.empty(), "{}", text_cfg_problem);
    return std::make_unique<Qwen3VlTextModel>(*text_weights, text_cfg, kConditioningLayer,
                                              Qwen3VlTextOptions{vae_precision(), Device::cpu, tp});
  }

  // One request on its way through the phases of run(): where it runs, how it reports, what it has produced.
  struct Run {
    Run(Comm& c, const ProgressFn& progress_fn, const std::atomic<bool>* cancel_flag, const PrecomputedInputs* inputs)
        : comm(c), root(c.rank() == 0), progress(progress_fn), cancel(cancel_flag), pre(inputs) {}
    Comm& comm;
    bool root = false;
    clock_type::time_point t_start = clock_type::now();
    const ProgressFn& progress;
    const std::atomic<bool>* cancel = nullptr;
    const PrecomputedInputs* pre = nullptr;
    GenerateResult res;

    // Progress: fixed shares of the whole request per phase; ETA from the elapsed time and the share done.
    static constexpr double w_encode = 3, w_denoise = 85, w_video = 8, w_audio = 3, w_write = 1;
    void report(const std::string& phase, int step, int steps, double done_before, double share) const {
      if (!root || !progress) return;
      GenerateProgress p;
      p.phase = phase;
      p.step = step;
      p.steps = steps;
      p.percent = done_before + (steps > 0 ? share * step / steps : 0.0);
      const double el = seconds_since(t_start);
      p.eta_s = p.percent > 0.5 && phase == "denoise" && step > 0 ? el / p.percent * (100 - p.percent)
                : phase == "done"                                 ? 0.0
                                                                  : -1.0;
      progress(p);
    }
    // One agreed control word outside the denoise loop (between phases).
    void check_cancel(const char* where) const {
      const bool want = root && cancel && cancel->load();
      if (step_control(comm, want ? ControlWord::cancel : ControlWord::proceed) == ControlWord::cancel)
        throw Cancelled(fmt::format("request cancelled {}", where));
    }
    void phase_done(const char* name, clock_type::time_point t0) { res.timings.push_back({name, seconds_since(t0)}); }
  };

  // What the encode phase hands to the denoise phase.
  struct Encoded {
    Tensor embeds;  // [L, text_dim] f32 on every rank
    std::shared_ptr<const PackedLayout> layout;
    ConditionRows cond;
  };

  // Rank 0's request is the one that runs; it must fit these models.
  void take_request(Run& run, const ResolvedRequest& req_in) const {
    Comm& comm = run.comm;
    run.res.request = comm.size() > 1 ? ResolvedRequest::from_json(json::parse(bcast_string(
                                            comm, run.root ? req_in.to_json().dump() : "", 0, "generate request")))
                                      : req_in;
    const ResolvedRequest& req = run.res.request;
    H3_CHECK(req.height % limits.canvas_multiple == 0 && req.width % limits.canvas_multiple == 0 &&
                 req.latent_h * limits.vae_spatial_ratio == req.height &&
                 req.latent_w * limits.vae_spatial_ratio == req.width,
             "request {}x{} does not fit these models (multiples of {}, VAE stride {}): resolve it with the "
             "generator's limits()",
             req.width, req.height, limits.canvas_multiple, limits.vae_spatial_ratio);
  }

  // LoRAs: the denoise ranks re-merge from the pristine weights when the set changes (every rank sees the same
  // request, so all decide alike; the DitModel's digest agreement names a rank that merged otherwise).
  void switch_loras(Run& run) {
    const ResolvedRequest& req = run.res.request;
    if (denoiser && (!dit || req.loras != loras_merged)) {
      const auto t_lora = clock_type::now();
      merge_loras(req.loras, run.comm.world_rank(run.comm.rank()));
      run.res.lora_remerged = true;
      run.res.timings.push_back({"lora_merge", seconds_since(t_lora)});
    }
    run.res.lora_digest = lora_digest;
  }

  // The encode phase: prompt embeddings, the packed layout, and the keyframe / reference rows.
  Encoded encode(Run& run) const {
    run.check_cancel("before encoding");
    run.report("encode", 0, 1, 0, Run::w_encode);
    const auto t0 = clock_type::now();
    Encoded enc;
    std::vector<std::pair<int64_t, int64_t>> vision_ranges;
    enc.embeds = prompt_embeddings(run, vision_ranges);
    const ResolvedRequest& req = run.res.request;
    enc.layout = std::make_shared<const PackedLayout>(
        request_layout(req, text_tags_with_vision(enc.embeds.dim(0), vision_ranges)));
    enc.cond = condition_rows(run, *enc.layout);
    run.phase_done("encode", t0);
    run.report("encode", 1, 1, 0, Run::w_encode);
    return enc;
  }

  // Prompt embeddings on every rank, from the text tower or precomputed; `vision_ranges` gets the prompt rows the
  // vision tower fed.
  Tensor prompt_embeddings(Run& run, std::vector<std::pair<int64_t, int64_t>>& vision_ranges) const {
    Comm& comm = run.comm;
    const bool root = run.root;
    const PrecomputedInputs* pre = run.pre;
    const ResolvedRequest& req = run.res.request;
    GenerateResult& res = run.res;
    Tensor embeds;
    std::string prompt_extra;  // JSON {vision_ranges, warnings} from the encoding rank
    const bool have_pre_embeds = pre && pre->prompt_embeds.defined() && pre->prompt_embeds.numel() > 0;
    // Rank 0 decides where the embeddings come from (precomputed ones are taken from rank 0).
    int32_t from_pre = have_pre_embeds ? 1 : 0;
    if (comm.size() > 1) comm.broadcast(&from_pre, sizeof(from_pre), 0, "embeddings source");
    int src = from_pre ? 0 : encoder_root;
    // Every encoder rank runs the (tensor-parallel) tower; with K = 0 that is every rank, and all end with the
    // embeddings.
    const bool everyone_encodes = !from_pre && opt.encoder_ranks == 0;
    // Rank 0 (which holds the keyframe / reference files) builds the prompt: tokens, and for pictures and
    // videos the vision tower's rows and the mRoPE positions; the encoder ranks get it by broadcast. An error
    // there (bad file, missing tower) travels too, so every rank fails the request with rank 0's message.
    PromptInputs prompt;
    if (!from_pre) {
      std::string failure;
      if (root) {
        try {
          prompt = prepare_prompt(req);
        } catch (const Error& e) {
          failure = e.what();
        }
      }
      if (comm.size() > 1) failure = bcast_string(comm, failure, 0, "prompt preparation status");
      if (!failure.empty()) {
        if (root) fail("{}", failure);
        fail("rank 0 could not prepare the prompt: {}", failure);
      }
      if (comm.size() > 1) bcast_prompt(comm, prompt, 0);
    }
    if (comm.rank() == src || (!from_pre && encoder)) {
      if (from_pre) {
        H3_CHECK(have_pre_embeds, "rank 0 passed precomputed embeddings but this rank did not");
        embeds = pre->prompt_embeds.to(DType::f32);
      } else {
        std::unique_ptr<Qwen3VlTextModel> tower = text ? nullptr : load_text(comm.size() > 1 ? &comm : nullptr);
        PromptEncoding pe = encode_prompt(prompt, text ? *text : *tower, kConditioningLayer);
        embeds = pe.embeds;
        prompt_extra =
            json{{"vision_ranges", pe.vision_ranges}, {"vision_rows", pe.vision_rows}, {"warnings", pe.warnings}}
                .dump();
      }  // the per-request tower is freed here, before denoising
      H3_CHECK(embeds.ndim() == 2 && embeds.dim(1) == dit_config.text_dim,
               "prompt embeddings are {}, the DiT needs [L, {}]", shape_str(embeds.shape()), dit_config.text_dim);
    }
    if (comm.size() > 1 && !everyone_encodes) bcast_tensor(comm, embeds, src, "prompt embeddings");
    if (comm.size() > 1 && !everyone_encodes)
      prompt_extra = bcast_string(comm, prompt_extra, src, "prompt vision rows");
    run.check_cancel("after encoding the prompt");
    res.prompt_tokens = embeds.dim(0);
    if (!prompt_extra.empty()) {
      const json pj = json::parse(prompt_extra);
      vision_ranges = pj.at("vision_ranges").get<std::vector<std::pair<int64_t, int64_t>>>();
      res.vision_rows = pj.at("vision_rows").get<int64_t>();
      res.vision_blocks = static_cast<int64_t>(vision_ranges.size());
      res.warnings = pj.at("warnings").get<std::vector<std::string>>();
    } else if (!req.media.empty()) {
      res.warnings.push_back("precomputed prompt embeddings: no vision rows for the keyframes / references");
    }
    return embeds;
  }

  // Keyframes / references: rank 0 reads and encodes them, every rank gets the rows (pipeline/conditions.h).
  ConditionRows condition_rows(Run& run, const PackedLayout& layout) const {
    Comm& comm = run.comm;
    const ResolvedRequest& req = run.res.request;
    ConditionRows cond;
    if (req.media.empty()) return cond;
    H3_CHECK(vvae->has_encoder() && avae->has_encoder(),
             "{} needs the VAE encoders but {} has none: pass a video VAE / audio VAE with encoder weights", req.mode,
             vvae->has_encoder() ? avae_path : vvae_path);
    if (run.root) cond = encode_conditions(req, *vvae, *avae);
    if (comm.size() > 1 && layout.num_condition_video_rows > 0)
      bcast_tensor(comm, cond.video, 0, "condition video rows");
    if (comm.size() > 1 && layout.num_condition_audio_rows > 0)
      bcast_tensor(comm, cond.audio, 0, "reference audio rows");
    run.check_cancel("after encoding the keyframes / references");
    return cond;
  }

  // The denoise phase: seeded noise (CPU generator, seeded per request: the same on every rank and for every rank
  // count), then the Euler loop on the denoise ranks; every rank ends with the final rows and latents in `res`.
  SamplingSpec denoise(Run& run, const Encoded& enc, SamplingRows& rows) const {
    Comm& comm = run.comm;
    const bool root = run.root;
    const PrecomputedInputs* pre = run.pre;
    const ResolvedRequest& req = run.res.request;
    SamplingSpec spec;
    spec.latent_frames = req.latent_frames;
    spec.latent_h = req.latent_h;
    spec.latent_w = req.latent_w;
    spec.audio_latents = req.audio_latents;
    spec.num_text = enc.embeds.dim(0);
    spec.steps = req.steps;
    spec.shift = req.shift;
    spec.audio_shift = req.audio_shift;
    spec.layout = enc.layout;
    spec.cond_video_rows = enc.cond.video;
    spec.cond_audio_rows = enc.cond.audio;
    const DitConfig& dc = dit_config;
    const Shape vshape{dc.in_channels, req.latent_frames, req.latent_h, req.latent_w};
    const Shape ashape{2 * req.audio_latents, dc.audio_in_channels};
    // Precomputed noise is taken from rank 0 (broadcast), so only rank 0 needs it.
    auto noise = [&](const Tensor* given, const Shape& shape, uint64_t stream, const char* what) {
      int32_t use = root && given && given->defined() && given->numel() > 0 ? 1 : 0;
      if (comm.size() > 1) comm.broadcast(&use, sizeof(use), 0, std::string(what) + " source");
      if (!use) return seeded_normal(shape, req.seed, stream);
      Tensor t = root ? given->to(DType::f32) : Tensor();
      if (comm.size() > 1) bcast_tensor(comm, t, 0, what);
      return t;
    };
    Tensor vnoise = noise(pre ? &pre->video_noise : nullptr, vshape, 0, "video noise");
    Tensor anoise = noise(pre ? &pre->audio_noise_rows : nullptr, ashape, 1, "audio noise rows");

    const auto t0 = clock_type::now();
    bool cancelled = false;
    const int calls = req.model_calls;
    if (denoiser) {
      auto on_step = [&](int step, int total, const SamplingRows&) {
        run.report("denoise", step + 1, total, Run::w_encode, Run::w_denoise);
      };
      auto want_cancel = [&]() { return run.cancel && run.cancel->load(); };
      run.report("denoise", 0, calls, Run::w_encode, Run::w_denoise);
      rows = denoise_loop(*dit, spec, enc.embeds, vnoise, anoise, comm, want_cancel, on_step, &cancelled);
    } else {
      cancelled = follow_denoise_loop(spec, comm);
    }
    if (cancelled) throw Cancelled(fmt::format("request cancelled during denoising"));
    if (opt.encoder_ranks > 0) {  // the encoder ranks take the rows from rank 0
      bcast_tensor(comm, rows.video, 0, "final video rows");
      bcast_tensor(comm, rows.audio, 0, "final audio rows");
    }
    run.res.video_latents = rows_to_video_latents(rows, spec, dc.in_channels);
    run.res.audio_latent_rows = rows.audio.to(DType::f32);
    run.phase_done("denoise", t0);
    // NaN/Inf in the final latents (non-finite weights in the checkpoint or a LoRA, bad precomputed inputs, a
    // diverged run) fail the request with the reason instead of writing a video of garbage. Rank 0 counts and
    // every rank gets the verdict, so all fail alike.
    int64_t non_finite =
        run.root ? count_non_finite(run.res.video_latents) + count_non_finite(run.res.audio_latent_rows) : 0;
    if (comm.size() > 1) comm.broadcast(&non_finite, sizeof(non_finite), 0, "non-finite latents");
    H3_CHECK(non_finite == 0,
             "the final latents hold {} non-finite values (NaN or Inf): the checkpoint, a LoRA or the precomputed "
             "inputs hold non-finite numbers, or the run diverged; nothing was written (check the weights with "
             "`h3 info`)",
             non_finite);
    return spec;
  }

  // The decode phase (every rank; units sharded over the group).
  void decode(Run& run, const SamplingRows& rows, const SamplingSpec& spec, Tensor& pixels, Tensor& wave) const {
    Comm* group = run.comm.size() > 1 ? &run.comm : nullptr;
    run.check_cancel("before the video decode");
    auto t0 = clock_type::now();
    run.report("decode_video", 0, 1, Run::w_encode + Run::w_denoise, Run::w_video);
    pixels = decode_video_latents(*vvae, run.res.video_latents, group);
    run.phase_done("decode_video", t0);
    run.check_cancel("before the audio decode");
    t0 = clock_type::now();
    run.report("decode_audio", 0, 1, Run::w_encode + Run::w_denoise + Run::w_video, Run::w_audio);
    wave = decode_audio_latents(*avae, rows_to_audio_latents(rows, spec), group);
    run.phase_done("decode_audio", t0);
    run.check_cancel("before writing");
  }

  // The write phase (rank 0). The MP4 writer and write_safetensors are atomic; a failure removes what this
  // request wrote.
  void write(Run& run, const std::string& out_path, const Tensor& pixels, const Tensor& wave) const {
    GenerateResult& res = run.res;
    const ResolvedRequest& req = res.request;
    const auto t0 = clock_type::now();
    run.report("write", 0, 1, 100 - Run::w_write, Run::w_write);
    if (run.root && !out_path.empty()) {
      const std::string latents_path = fs::path(out_path).replace_extension(".latents.safetensors").string();
      std::map<std::string, std::string> md = {{"request", req.to_json().dump()}, {"generator", "h3 generate"}};
      auto write_latents = [&]() {
        write_safetensors(latents_path,
                          {{"video_latents", res.video_latents}, {"audio_latent_rows", res.audio_latent_rows}}, md);
      };
      MediaSpec ms;
      ms.width = req.width;
      ms.height = req.height;
      ms.fps = static_cast<int>(kFps);
      ms.sample_rate = static_cast<int>(avae->config().sampling_rate);
      ms.channels = 2;
      ms.metadata["comment"] = req.to_json().dump();
      ms.metadata["title"] = req.prompt.substr(0, 200);
      ms.metadata["h3_seed"] = std::to_string(req.seed);
      {
        Mp4Writer w(out_path, ms);
        w.add_frames(pixels);
        w.add_audio(wave);
        w.finish();
      }
      res.wrote_mp4 = true;
      res.out_path = out_path;
      if (opt.write_latents) {
        try {
          write_latents();
        } catch (...) {
          std::error_code ec;
          fs::remove(out_path, ec);
          throw;
        }
      }
    }
    run.phase_done("write", t0);
  }
};

Generator::Generator(const ModelPaths& paths, const GenerateOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const auto t0 = clock_type::now();
  m.opt = options;
  m.comm = options.comm ? options.comm : &world();
  Comm& comm = *m.comm;
  const int n = comm.size(), K = options.encoder_ranks;
  H3_CHECK(K >= 0 && (K == 0 || K < n),
           "--encoder-ranks {} needs at least one denoise rank besides them: use 0 (default) or 1..{} with {} "
           "ranks",
           K, n - 1, n);
  m.encoder_root = K > 0 ? n - K : 0;
  m.denoiser = comm.rank() < n - K;
  m.encoder = K > 0 ? !m.denoiser : true;  // K = 0: the whole group runs the tower, tensor-parallel

  // Which files.
  // DitCheckpoint::open understands the model folder (with its transformer/ subfolder) itself.
  m.dit_path = !paths.dit.empty() ? paths.dit : !paths.model_dir.empty() ? paths.model_dir : kProceduralMini;
  m.vvae_path = pick(paths.video_vae, paths.model_dir, {"vae", "video_vae"});
  m.avae_path = pick(paths.audio_vae, paths.model_dir, {"audio_vae"});
  m.text_path = pick(paths.text_encoder, paths.model_dir, {"text_encoder"});
  m.tok_path = paths.tokenizer.empty() && !paths.model_dir.empty()
                   ? pick("", paths.model_dir, {"tokenizer/tokenizer.json", "tokenizer.json"})
               : paths.tokenizer.empty() ? kProceduralMini
                                         : paths.tokenizer;

  // DiT (the denoise ranks load weights; every rank knows the config).
  m.ckpt = std::make_unique<DitCheckpoint>(DitCheckpoint::open(m.dit_path));
  m.dit_config = m.ckpt->config();
  m.any_procedural |= m.ckpt->layout() == DitLayout::procedural;
  m.described.push_back(fmt::format("dit          {}: {}", m.dit_path, m.ckpt->detection_summary()));

  // Video VAE.
  if (is_procedural(m.vvae_path)) {
    m.vvae_file = procedural_video_vae_file(procedural_mini_seed(m.vvae_path, "--video-vae"));
    m.vvae =
        std::make_unique<VideoVae>(*m.vvae_file, "", procedural_video_vae_config(), m.vae_precision(), m.vae_device());
    m.any_procedural = true;
  } else {
    ComponentFile c = open_component(m.vvae_path, "video VAE");
    m.vvae_file = c.file;
    const VideoVaeConfig cfg = VideoVaeConfig::from_json_text(c.config_json, c.extra_json, m.vvae_path);
    const std::string prefix = c.file->has("weight.post_quant_conv.weight") ? "weight." : "";
    m.vvae = std::make_unique<VideoVae>(*c.file, prefix, cfg, m.vae_precision(), m.vae_device());
  }
  m.described.push_back(fmt::format("video VAE    {}: {}", m.vvae_path, m.vvae->config().summary()));

  // Audio VAE.
  if (is_procedural(m.avae_path)) {
    m.avae_file = procedural_audio_vae_file(procedural_mini_seed(m.avae_path, "--audio-vae"));
    m.avae =
        std::make_unique<AudioVae>(*m.avae_file, "", procedural_audio_vae_config(), m.vae_precision(), m.vae_device());
    m.any_procedural = true;
  } else {
    ComponentFile c = open_component(m.avae_path, "audio VAE");
    m.avae_file = c.file;
    const AudioVaeConfig cfg =
        c.config_json.empty() ? AudioVaeConfig{} : AudioVaeConfig::from_json_text(c.config_json, m.avae_path);
    const std::string prefix = c.file->has("weight.dec_in_proj.weight") ? "weight." : "";
    m.avae = std::make_unique<AudioVae>(*c.file, prefix, cfg, m.vae_precision(), m.vae_device());
  }
  m.described.push_back(fmt::format("audio VAE    {}: {}", m.avae_path, m.avae->config().summary()));

  // The components must fit together.
  const DitConfig& dc = m.dit_config;
  H3_CHECK(m.vvae->config().latent_channels == dc.in_channels,
           "the video VAE has {} latent channels but the DiT expects {} ({} vs {}): pass matching "
           "--video-vae/--dit",
           m.vvae->config().latent_channels, dc.in_channels, m.vvae_path, m.dit_path);
  H3_CHECK(m.avae->config().latent_channels == dc.audio_in_channels,
           "the audio VAE has {} latent channels but the DiT expects {} ({} vs {}): pass matching "
           "--audio-vae/--dit",
           m.avae->config().latent_channels, dc.audio_in_channels, m.avae_path, m.dit_path);
  H3_CHECK(m.vvae->config().temporal_ratio() == 4 && m.vvae->config().clip_length == kFramesPerChunk,
           "{}: the video VAE compresses time by {} in clips of {} frames; the t2va frame rules need 4 and 17",
           m.vvae_path, m.vvae->config().temporal_ratio(), m.vvae->config().clip_length);
  m.limits.vae_spatial_ratio = m.vvae->config().spatial_ratio();
  m.limits.canvas_multiple = m.limits.vae_spatial_ratio * kPatch;
  m.limits.audio_hop = m.avae->config().hop();
  m.limits.audio_sample_rate = static_cast<int>(m.avae->config().sampling_rate);
  if (is_procedural(m.vvae_path)) use_procedural_reference_sizes(m.limits);

  // Text tower: only its header here (weights are loaded where and when they are used).
  if (is_procedural(m.text_path)) {
    m.text_weights = std::make_shared<Qwen3VlTextWeights>(Qwen3VlTextWeights::from_file(
        procedural_qwen3vl_text_file(procedural_mini_seed(m.text_path, "--text-encoder"))));
    m.any_procedural = true;
  } else {
    // A file, or a transformers folder (config.json + index + shards): only the text layers are read.
    m.text_weights = std::make_shared<Qwen3VlTextWeights>(Qwen3VlTextWeights::open(m.text_path));
  }
  m.text_cfg = detect_qwen3vl_text_config(*m.text_weights);
  if (m.text_cfg.hidden != dc.text_dim)
    m.text_cfg_problem = fmt::format(
        "the text encoder ({}) is {} wide but the DiT reads {}-wide prompt embeddings: pass the matching "
        "--text-encoder (or --embeddings)",
        m.text_path, m.text_cfg.hidden, dc.text_dim);
  else if (m.text_cfg.n_layers < kConditioningLayer)
    m.text_cfg_problem = fmt::format("the text encoder ({}) has {} layers; H3 conditions on hidden state {}",
                                     m.text_path, m.text_cfg.n_layers, kConditioningLayer);
  m.described.push_back(fmt::format("text encoder {}: {}{}", m.text_path, m.text_cfg.summary(),
                                    m.text_cfg_problem.empty() ? "" : " (UNUSABLE: " + m.text_cfg_problem + ")"));

  // Tokenizer (the encoding rank only needs it, but it is small and every rank validates the same file).
  if (is_procedural(m.tok_path)) {
    m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_json_text(builtin_tokenizer_json(),
                                                                        "built-in "
                                                                        "byte-level tokenizer"));
    m.any_procedural = true;
  } else {
    const std::string p =
        fs::is_directory(m.tok_path) ? (fs::path(m.tok_path) / "tokenizer.json").string() : m.tok_path;
    m.tokenizer = std::make_unique<Tokenizer>(Tokenizer::from_file(p));
  }
  m.described.push_back(fmt::format("tokenizer    {}: {} ids", m.tok_path, m.tokenizer->vocab_size()));
  if (m.text_cfg_problem.empty() && static_cast<int64_t>(m.tokenizer->vocab_size()) > m.text_cfg.vocab_size)
    m.text_cfg_problem = fmt::format("the tokenizer ({}) has {} ids but the text encoder's vocabulary only {}",
                                     m.tok_path, m.tokenizer->vocab_size(), m.text_cfg.vocab_size);

  // Ranks: denoise group and DiT weights; the text tower stays resident on dedicated encoder ranks.
  if (K > 0) m.role_comm = comm.split(m.denoiser ? 0 : 1, comm.rank());
  if (m.denoiser) {
    Comm* dcomm = K > 0 ? m.role_comm.get() : &comm;
    m.plan = dcomm->size() > 1 ? DistPlan::make(*dcomm, options.dist, dc.num_attention_heads, dc.ffn_dim)
                               : DistPlan::single();
    m.dit = std::make_unique<DitModel>(*m.ckpt, options.precision, m.plan);
    m.described.push_back(
        fmt::format("denoise      {} rank(s){}", dcomm->size(), dcomm->size() > 1 ? ": " + m.plan.describe() : ""));
  }
  if (K > 0 && m.encoder && m.text_cfg_problem.empty()) m.text = m.load_text(K > 1 ? m.role_comm.get() : nullptr);
  m.described.push_back(
      K > 0 ? fmt::format("encoder      {} dedicated rank(s) {}..{}, tensor-parallel over {}, the tower stays loaded",
                          K, n - K, n - 1, std::min<int64_t>(K, m.text_cfg.n_kv_heads))
            : fmt::format("encoder      tensor-parallel over {} of {} rank(s), loaded per request and freed "
                          "before denoising",
                          std::min<int64_t>(n, m.text_cfg.n_kv_heads), n));
  m.load_s = seconds_since(t0);
}

Generator::~Generator() = default;

const ModelLimits& Generator::limits() const {
  return impl_->limits;
}

ModelLimits Generator::limits_for(const ModelPaths& paths) {
  ModelLimits lim;
  const std::string v = pick(paths.video_vae, paths.model_dir, {"vae", "video_vae"});
  if (is_procedural(v)) {  // the procedural VAE has the released strides
    use_procedural_reference_sizes(lim);
    return lim;
  }
  ComponentFile c = open_component(v, "video VAE");
  const VideoVaeConfig cfg = VideoVaeConfig::from_json_text(c.config_json, c.extra_json, v);
  lim.vae_spatial_ratio = cfg.spatial_ratio();
  lim.canvas_multiple = lim.vae_spatial_ratio * kPatch;
  return lim;
}
std::vector<std::string> Generator::describe() const {
  return impl_->described;
}
bool Generator::procedural() const {
  return impl_->any_procedural;
}
int Generator::sample_rate() const {
  return static_cast<int>(impl_->avae->config().sampling_rate);
}
double Generator::load_seconds() const {
  return impl_->load_s;
}

GenerateResult Generator::run(const ResolvedRequest& req_in, const std::string& out_path, const ProgressFn& progress,
                              const std::atomic<bool>* cancel, const PrecomputedInputs* pre) {
  Impl& m = *impl_;
  Impl::Run run(*m.comm, progress, cancel, pre);
  GenerateResult& res = run.res;
  if (m.first_run) res.timings.push_back({"load", m.load_s});
  m.first_run = false;
  m.take_request(run, req_in);
  m.switch_loras(run);
  const Impl::Encoded enc = m.encode(run);
  SamplingRows rows;
  const SamplingSpec spec = m.denoise(run, enc, rows);
  Tensor pixels, wave;
  m.decode(run, rows, spec, pixels, wave);
  m.write(run, out_path, pixels, wave);
  if (m.opt.keep_media) {
    res.pixels01 = pixels;
    res.waveform = wave;
  }
  run.report("done", 1, 1, 100, 0);
  return std::move(res);
}

}  // namespace h3

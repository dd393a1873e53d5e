// Generator: the components opened once (pipeline/components.h), the models loaded where and when the memory plan
// says, requests run many times, phase by phase: encode, denoise, decode, mux.
//
// Rank roles inside the group `comm` (size n, encoder ranks K):
//   K = 0: every rank denoises; the text tower runs tensor-parallel over the whole group (model/qwen3vl/text.h:
//          KV-head units, ranks beyond the KV head count hold nothing and receive the output), loaded per request
//          and freed before denoising unless the memory plan keeps it resident. Every rank ends the encode with the
//          embeddings, so nothing is broadcast.
//   K > 0: ranks [0, n-K) denoise, ranks [n-K, n) keep the text tower loaded, tensor-parallel among them;
//          rank n-K broadcasts the embeddings [L, text_dim] (L first, as one i64). Rank 0 of the group is
//          always a denoise rank, so progress and cancellation live there; the encoder ranks follow the per-step
//          control word and receive the final rows by broadcast before the decode.
// The tower's fold order does not depend on its rank count, so the embeddings (and the latents) are bitwise the
// same for every n and K.
// Every rank decodes (units sharded over the whole group) and ends with the same latents and media; rank 0
// writes.
//
// Residency (memory_plan.h). On the CPU the DiT and the VAEs are loaded by the constructor and kept, the text tower
// is loaded per request. On the GPU the constructor loads what the plan keeps resident (auto: planned for the largest
// request the models accept) and every request is planned before it loads anything: one that cannot fit is refused
// with the reason. A model that is not resident is loaded for its phase (timed as a load, not as the phase) and freed
// after it, and the allocator's cached blocks go back to the device so the next phase's model finds the memory.
#include "pipeline/generator.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/json_limits.h"
#include "backend/backend.h"
#include "core/log.h"
#include "distributed/control.h"
#include "distributed/placement.h"
#include "io/procedural.h"
#include "media/mp4_writer.h"
#include "model/dit/checkpoint.h"
#include "model/dit/lora.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/tokenizer.h"
#include "model/qwen3vl/vision.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"
#include "pipeline/bcast.h"
#include "pipeline/components.h"
#include "pipeline/conditions.h"
#include "pipeline/geometry.h"
#include "pipeline/noise.h"
#include "pipeline/sampling.h"
#include "pipeline/streaming_mp4.h"

namespace h3 {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline constexpr int64_t kConditioningLayer = 50;  // H3 conditions on hidden_states[50]

std::string procedural_models_notice() {
  return "NOTE: running on procedural (random) models: the pictures and the sound are meaningless noise. "
         "For real videos download the released MiniMax-H3 weights and pass --model DIR (the diffusers folder "
         "with transformer/, vae/, audio_vae/, text_encoder/, tokenizer/), or the components with --dit, "
         "--video-vae, --audio-vae, --text-encoder and --tokenizer.";
}

GenerateOptions default_generate_options(Device device, const std::string& precision) {
  GenerateOptions o;
  o.device = device;
  if (device == Device::cuda) {
    o.precision = precision.empty() ? Precision::bf16 : precision_from_name(precision);
    o.vae_precision = Precision::bf16;
    o.text_precision = Precision::bf16;  // the released recipe (transformers' bf16 model), on the GPU
    o.text_device = Device::cuda;
  } else {
    o.precision = precision.empty() ? Precision::f32 : precision_from_name(precision);
    o.vae_precision = o.precision == Precision::f64 ? Precision::f64 : Precision::f32;
    o.text_precision = o.vae_precision;
    o.text_device = Device::cpu;
  }
  return o;
}

void check_generate_options(const GenerateOptions& o) {
  const bool gpu = o.device == Device::cuda;
  H3_CHECK(gpu || o.precision != Precision::fp8,
           "precision fp8 runs on the GPU only: add --device cuda (the CPU runs f64, f32 or bf16)");
  H3_CHECK(o.vae_precision != Precision::fp8, "--vae-precision fp8: the VAEs run f32 or bf16 (GPU), f32 or f64 (CPU)");
  H3_CHECK(gpu || o.vae_precision != Precision::bf16,
           "--vae-precision bf16 runs on the GPU only (--device cuda); the CPU decodes in f32 or f64");
  H3_CHECK(!gpu || o.vae_precision != Precision::f64,
           "--vae-precision f64 runs on the CPU only; on the GPU the VAEs decode in bf16 or f32");
  H3_CHECK(o.text_precision != Precision::fp8,
           "--text-precision fp8: the text tower runs in bf16 or f32 on the GPU, f32 or f64 on the CPU");
  H3_CHECK(gpu || o.text_device == Device::cpu, "--text-device cuda needs --device cuda");
  H3_CHECK(o.text_device == Device::cuda || o.text_precision != Precision::bf16,
           "--text-precision bf16 runs on the GPU only (--text-device cuda); the CPU runs the text tower in f32 or "
           "f64");
  H3_CHECK(o.text_device == Device::cpu || o.text_precision != Precision::f64,
           "--text-precision f64 runs on the CPU only (--text-device cpu); on the GPU use bf16 or f32");
}

double GenerateResult::time_to_mp4() const {
  double s = 0;
  for (const auto& t : timings)
    if (t.phase != "load" && t.phase != "lora_merge") s += t.seconds;
  return s;
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

// The DiT mesh (K tensor-parallel, U sequence-parallel) of n denoise ranks, as DistPlan::make builds it.
std::pair<int, int> mesh_of(const DistOptions& d, int n) {
  if (d.mode == DistMode::tensor) return {n, 1};
  if (d.mode == DistMode::hybrid) return {d.tp, std::max(1, n / std::max(1, d.tp))};
  return {1, n};
}

// The GPU memory this rank may use: the device's, divided among the ranks that share it (same PCI bus id), the
// smallest over the group so every rank plans alike.
int64_t agreed_device_bytes(Comm& comm) {
  const std::string bus = gpu_bus_id();
  const uint64_t mine = bus.empty() ? 0 : std::hash<std::string>{}(bus);
  std::vector<uint64_t> buses(static_cast<size_t>(comm.size()));
  comm.allgatherv(&mine, buses.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "GPU bus ids (memory plan)");
  int64_t sharing = 0;
  for (uint64_t b : buses) sharing += b == mine;
  const int64_t own = static_cast<int64_t>(gpu_total_bytes()) / std::max<int64_t>(sharing, 1);
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgatherv(&own, all.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "GPU memory (memory plan)");
  return *std::min_element(all.begin(), all.end());
}

// The plan's inputs for one request (or the largest one a server accepts): models, precisions, placement, packed
// length.
MemoryPlanInputs plan_inputs(const ModelSources& s, const GenerateOptions& o, const ResolvedRequest& r, int world,
                             int64_t device_bytes) {
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
  in.text_layers = kConditioningLayer;
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
  in.device_bytes = device_bytes;
  in.policy = o.memory;
  return in;
}

// The largest request the models accept (the longest video at the largest canvas, a prompt of 1,000 bytes): what a
// generator that keeps models resident must leave room for. Each request is still planned before it runs.
ResolvedRequest largest_request(const ModelLimits& lim) {
  GenerateRequest q;
  q.prompt = std::string(1000, 'x');
  q.width = 1344;
  q.height = 768;
  q.frames = lim.max_frames;
  q.seed = 0;
  return resolve(q, lim);
}

// Peak device memory of one phase (rank 0 reports it): the allocator's high-water mark from a clean start.
struct PhaseMeter {
  bool gpu;
  explicit PhaseMeter(bool on_gpu) : gpu(on_gpu) {
    if (!gpu) return;
    gpu_release_cached();
    gpu_reset_peak();
  }
  void done(const char* phase, GenerateResult& res) const {
    if (!gpu) return;
    gpu_synchronize();
    res.peaks.push_back({phase, static_cast<int64_t>(gpu_peak_bytes())});
  }
};

}  // namespace

struct Generator::Impl {
  GenerateOptions opt;
  Comm* comm = nullptr;
  std::unique_ptr<Comm> role_comm;  // the denoise ranks (or the encoder ranks) of `comm`
  bool denoiser = true, encoder = false;
  int encoder_root = 0;  // rank of `comm` that encodes
  bool gpu = false;

  ModelSources src;
  DistPlan plan;
  int64_t device_bytes = 0;
  bool dit_resident = true, text_resident = false, vae_resident = true;

  // Loaded models (null when not loaded). `dit` holds the LoRAs `loras_merged` (its checkpoint `ckpt`); a request
  // with another set re-opens the pristine, memory-mapped weights and merges again, so deltas never accumulate.
  // `dit` is null after a failed switch, which forces the next request to rebuild.
  std::unique_ptr<DitCheckpoint> ckpt;
  std::unique_ptr<DitModel> dit;
  std::vector<GenerateRequest::LoraRef> loras_merged, loras_last;
  uint64_t lora_digest = 0;
  std::unique_ptr<VideoVae> vvae;
  std::unique_ptr<AudioVae> avae;
  std::unique_ptr<Qwen3VlTextModel> text;

  std::vector<std::string> described;
  std::vector<LoadTiming> loads;  // since the last request (the constructor's are reported with the first)
  double load_s = 0;

  Device dit_device() const {
    return gpu && (opt.precision == Precision::bf16 || opt.precision == Precision::fp8) ? Device::cuda : Device::cpu;
  }
  Device vae_device() const { return gpu && opt.vae_precision != Precision::f64 ? Device::cuda : Device::cpu; }
  Device text_device() const { return gpu && opt.text_device == Device::cuda ? Device::cuda : Device::cpu; }
  Comm* denoise_comm() { return opt.encoder_ranks > 0 ? role_comm.get() : comm; }

  template <typename Fn>
  void timed_load(const char* model, int64_t file_bytes, Fn&& fn) {
    const auto t0 = clock_type::now();
    const int64_t before = gpu ? static_cast<int64_t>(gpu_in_use_bytes()) : 0;
    fn();
    if (gpu) gpu_synchronize();
    loads.push_back(
        {model, seconds_since(t0), file_bytes, gpu ? static_cast<int64_t>(gpu_in_use_bytes()) - before : 0});
  }

  // The DiT precision of `r`: its own when it names one (on the device this generator runs its DiT on), else the
  // generator's.
  Precision precision_for(const ResolvedRequest& r) const {
    if (r.precision.empty()) return opt.precision;
    const Precision p = precision_from_name(r.precision);
    if (dit_device() == Device::cuda)
      H3_CHECK(p == Precision::bf16 || p == Precision::fp8,
               "precision {}: this generator runs its DiT on the GPU, in bf16 or fp8", r.precision);
    else
      H3_CHECK(p != Precision::fp8, "precision fp8: this generator runs its DiT on the CPU (f64, f32 or bf16)");
    return p;
  }

  // Collective over the denoise ranks (DitModel checks that every rank merged the same LoRAs). `for_request`: the
  // request's LoRAs are merged (the constructor's pristine DiT merges none).
  void load_dit(const std::vector<GenerateRequest::LoraRef>& want, Precision precision, bool for_request = true) {
    dit.reset();  // free the old weights before the new ones are built
    loras_merged.clear();
    lora_digest = 0;
    auto ck = std::make_unique<DitCheckpoint>(DitCheckpoint::open(src.dit_path));
    std::vector<std::string> specs;
    for (const auto& l : want) specs.push_back(fmt::format("{}:{}", l.path, l.strength));
    if (for_request) add_loras(*ck, specs, comm->world_rank(comm->rank()));
    // On the GPU the DiT computes with the numerics the GPU backend was started with (deterministic mode, FP8
    // attention: core/numerics.h).
    const Device dev = dit_device();
    dit = std::make_unique<DitModel>(*ck, precision, plan, dev, dev == Device::cuda ? gpu_numerics() : Numerics{});
    ckpt = std::move(ck);
    loras_merged = want;
    lora_digest = want.empty() ? 0 : ckpt->lora_digest();
  }
  void free_dit() {
    dit.reset();
    ckpt.reset();
  }

  void load_vaes() {
    timed_load("video_vae", src.vvae_file_bytes, [&] { vvae = load_video_vae(src, opt.vae_precision, vae_device()); });
    // The audio decoder runs in f32 on the GPU whatever the VAE precision (audio_vae.h).
    timed_load("audio_vae", src.avae_file_bytes, [&] {
      avae =
          load_audio_vae(src, opt.vae_precision == Precision::bf16 ? Precision::f32 : opt.vae_precision, vae_device());
    });
  }

  // Collective over `tp` (null: this rank alone).
  std::unique_ptr<Qwen3VlTextModel> load_text(Comm* tp) {
    H3_CHECK(src.text_problem.empty(), "{}", src.text_problem);
    std::unique_ptr<Qwen3VlTextModel> t;
    timed_load("text", text_file_bytes(src, kConditioningLayer), [&] {
      t = std::make_unique<Qwen3VlTextModel>(*src.text_weights, src.text_config, kConditioningLayer,
                                             Qwen3VlTextOptions{opt.text_precision, text_device(), tp});
    });
    return t;
  }

  // The prompt of `r` (rank 0): the vision tower (where the text tower runs, in its precision) is loaded for requests
  // with pictures or videos and freed when the prompt is built (it is small next to the LM; its rows are all the LM
  // needs).
  PromptInputs prepare_prompt(const ResolvedRequest& r) {
    bool visual = false;
    for (const ConditionMedia& c : r.media) visual |= c.visual();
    if (!visual) return h3::prepare_prompt(r, *src.tokenizer, nullptr);
    H3_CHECK(src.text_weights && has_qwen3vl_vision(*src.text_weights),
             "{} with pictures or videos needs Qwen3-VL's vision tower, but the text encoder {} holds none (no "
             "'*patch_embed.proj.weight'; e.g. a text-only truncated encoder): pass the full Qwen3-VL "
             "text_encoder folder with --text-encoder",
             r.mode, src.text_path);
    const Qwen3VlVisionConfig vc = detect_qwen3vl_vision_config(*src.text_weights);
    H3_CHECK(vc.out_hidden == src.text_config.hidden,
             "the vision tower in {} gives {}-wide rows but its text decoder is {} wide: the file mixes models",
             src.text_path, vc.out_hidden, src.text_config.hidden);
    std::unique_ptr<Qwen3VlVisionModel> vision;
    timed_load("vision", 0, [&] {
      vision = std::make_unique<Qwen3VlVisionModel>(*src.text_weights, vc,
                                                    Qwen3VlVisionOptions{opt.text_precision, text_device()});
    });
    return h3::prepare_prompt(r, *src.tokenizer, vision.get());
  }

  MemoryPlan plan_for(const ResolvedRequest& r) const {
    if (!gpu) return MemoryPlan{};
    GenerateOptions o = opt;
    o.precision = precision_for(r);
    MemoryPlanInputs in = plan_inputs(src, o, r, comm->size(), device_bytes);
    return plan_memory_resident(in, dit_resident, text_resident, vae_resident);
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
    ControlWord root_word() const {
      return root && cancel && cancel->load() ? ControlWord::cancel : ControlWord::proceed;
    }
    // One agreed control word outside the denoise loop (between phases).
    void check_cancel(const char* where) const {
      if (step_control(comm, root_word()) == ControlWord::cancel)
        throw Cancelled(fmt::format("request cancelled {}", where));
    }
    // Inside the prompt encoding: one word per text-tower layer on every rank of the group (the encoder ranks
    // before each layer, the others in step with them), so a cancel stops the encoding within one layer (a layer
    // of the released tower is ~1/36 of the encode). Synced: with encoder ranks, rank 0 has no layers of its own
    // to pace it.
    void check_cancel_layer(int64_t layer, int64_t layers) const {
      if (synced_control(comm, root_word()) == ControlWord::cancel)
        throw Cancelled(
            fmt::format("request cancelled while encoding the prompt (before text layer {} of {})", layer + 1, layers));
    }
  };

  // A phase's time, without the loads made inside it (loads from `loads_before` on: they are timed as loads).
  void phase_done(Run& run, const char* name, clock_type::time_point t0, size_t loads_before) const {
    if (gpu) gpu_synchronize();
    double s = seconds_since(t0);
    for (size_t i = loads_before; i < loads.size(); ++i) s -= loads[i].seconds;
    run.res.timings.push_back({name, s});
  }

  // What the encode phase hands to the denoise phase.
  struct Encoded {
    Tensor embeds;  // [L, text_dim] f32 on every rank
    std::shared_ptr<const PackedLayout> layout;
    ConditionRows cond;
  };

  // Rank 0's request is the one that runs; it must fit these models, and on the GPU the memory plan before anything
  // is loaded for it.
  void take_request(Run& run, const ResolvedRequest& req_in) const {
    Comm& comm = run.comm;
    run.res.request = comm.size() > 1 ? ResolvedRequest::from_json(parse_json_bounded(
                                            bcast_string(comm, run.root ? req_in.to_json().dump() : "", 0, "generate request"),
                                            "the broadcast request", kJsonMaxDepth, false))
                                      : req_in;
    const ResolvedRequest& req = run.res.request;
    const ModelLimits& limits = src.limits;
    H3_CHECK(req.height % limits.canvas_multiple == 0 && req.width % limits.canvas_multiple == 0 &&
                 req.latent_h * limits.vae_spatial_ratio == req.height &&
                 req.latent_w * limits.vae_spatial_ratio == req.width,
             "request {}x{} does not fit these models (multiples of {}, VAE stride {}): resolve it with the "
             "generator's limits()",
             req.width, req.height, limits.canvas_multiple, limits.vae_spatial_ratio);
    if (gpu) {
      run.res.memory_plan = plan_for(req);
      H3_CHECK(run.res.memory_plan.fits, "this request does not fit the GPU beside the resident models: {}",
               run.res.memory_plan.problem);
    }
  }

  // The encode phase: prompt embeddings, the packed layout, and the keyframe / reference rows.
  Encoded encode(Run& run) {
    run.check_cancel("before encoding");
    run.report("encode", 0, 1, 0, Run::w_encode);
    const PhaseMeter meter(gpu);
    const auto t0 = clock_type::now();
    const size_t loads0 = loads.size();
    Encoded enc;
    std::vector<std::pair<int64_t, int64_t>> vision_ranges;
    enc.embeds = prompt_embeddings(run, vision_ranges);
    const ResolvedRequest& req = run.res.request;
    enc.layout = std::make_shared<const PackedLayout>(
        request_layout(req, text_tags_with_vision(enc.embeds.dim(0), vision_ranges)));
    enc.cond = condition_rows(run, *enc.layout);
    phase_done(run, "encode", t0, loads0);
    meter.done("encode", run.res);
    run.report("encode", 1, 1, 0, Run::w_encode);
    return enc;
  }

  // Prompt embeddings on every rank (f32, host), from the text tower or precomputed; `vision_ranges` gets the prompt
  // rows the vision tower fed.
  Tensor prompt_embeddings(Run& run, std::vector<std::pair<int64_t, int64_t>>& vision_ranges) {
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
    int src_rank = from_pre ? 0 : encoder_root;
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
    if (comm.rank() == src_rank || (!from_pre && encoder)) {
      if (from_pre) {
        H3_CHECK(have_pre_embeds, "rank 0 passed precomputed embeddings but this rank did not");
        embeds = pre->prompt_embeds.to(DType::f32);
      } else {
        std::unique_ptr<Qwen3VlTextModel> tower = text ? nullptr : load_text(comm.size() > 1 ? &comm : nullptr);
        PromptEncoding pe = encode_prompt(prompt, text ? *text : *tower, kConditioningLayer,
                                          [&run](int64_t li, int64_t n) { run.check_cancel_layer(li, n); });
        embeds = pe.embeds.on_device() ? pe.embeds.cpu().to(DType::f32) : pe.embeds;
        prompt_extra =
            json{{"vision_ranges", pe.vision_ranges}, {"vision_rows", pe.vision_rows}, {"warnings", pe.warnings}}
                .dump();
      }  // a per-request tower is freed here, before denoising
      H3_CHECK(embeds.ndim() == 2 && embeds.dim(1) == src.dit_config.text_dim,
               "prompt embeddings are {}, the DiT needs [L, {}]", shape_str(embeds.shape()), src.dit_config.text_dim);
    } else if (!from_pre) {  // a rank outside the encoder ranks: the per-layer control words, in step with them
      for (int64_t li = 0; li < kConditioningLayer; ++li) run.check_cancel_layer(li, kConditioningLayer);
    }
    if (comm.size() > 1 && !everyone_encodes) bcast_tensor(comm, embeds, src_rank, "prompt embeddings");
    if (comm.size() > 1 && !everyone_encodes)
      prompt_extra = bcast_string(comm, prompt_extra, src_rank, "prompt vision rows");
    run.check_cancel("after encoding the prompt");
    res.prompt_tokens = embeds.dim(0);
    if (!prompt_extra.empty()) {
      const json pj = parse_json_bounded(prompt_extra, "the broadcast vision rows", kJsonMaxDepth, false);
      vision_ranges = pj.at("vision_ranges").get<std::vector<std::pair<int64_t, int64_t>>>();
      res.vision_rows = pj.at("vision_rows").get<int64_t>();
      res.vision_blocks = static_cast<int64_t>(vision_ranges.size());
      res.warnings = pj.at("warnings").get<std::vector<std::string>>();
    } else if (!req.media.empty()) {
      res.warnings.push_back("precomputed prompt embeddings: no vision rows for the keyframes / references");
    }
    return embeds;
  }

  // Keyframes / references: rank 0 reads and encodes them (the VAE encoders run on the CPU; a VAE pair on the CPU
  // serves when the GPU decoders are not resident), every rank gets the rows (pipeline/conditions.h).
  ConditionRows condition_rows(Run& run, const PackedLayout& layout) {
    Comm& comm = run.comm;
    const ResolvedRequest& req = run.res.request;
    ConditionRows cond;
    if (req.media.empty()) return cond;
    std::unique_ptr<VideoVae> cpu_vvae;
    std::unique_ptr<AudioVae> cpu_avae;
    const Precision ep = opt.vae_precision == Precision::f64 ? Precision::f64 : Precision::f32;
    if (!vvae) timed_load("video_vae", src.vvae_file_bytes, [&] { cpu_vvae = load_video_vae(src, ep, Device::cpu); });
    if (!avae) timed_load("audio_vae", src.avae_file_bytes, [&] { cpu_avae = load_audio_vae(src, ep, Device::cpu); });
    const VideoVae& ve = vvae ? *vvae : *cpu_vvae;
    const AudioVae& ae = avae ? *avae : *cpu_avae;
    H3_CHECK(ve.has_encoder() && ae.has_encoder(),
             "{} needs the VAE encoders but {} has none: pass a video VAE / audio VAE with encoder weights", req.mode,
             ve.has_encoder() ? src.avae_path : src.vvae_path);
    if (run.root) cond = encode_conditions(req, ve, ae);
    if (comm.size() > 1 && layout.num_condition_video_rows > 0)
      bcast_tensor(comm, cond.video, 0, "condition video rows");
    if (comm.size() > 1 && layout.num_condition_audio_rows > 0)
      bcast_tensor(comm, cond.audio, 0, "reference audio rows");
    run.check_cancel("after encoding the keyframes / references");
    return cond;
  }

  // The DiT for this request: LoRAs and precision. The denoise ranks (re-)merge from the pristine weights when the
  // set changes (every rank sees the same request, so all decide alike; the DitModel's digest agreement names a rank
  // that merged otherwise), and rebuild the DiT in the request's precision. A resident DiT rebuilt for LoRAs is timed
  // as lora_merge; any other build (a DiT loaded for its phase) is a load.
  void switch_dit(Run& run) {
    const ResolvedRequest& req = run.res.request;
    const Precision precision = precision_for(req);
    run.res.precision = precision;
    run.res.lora_remerged = req.loras != loras_last;
    loras_last = req.loras;
    if (denoiser && (!dit || req.loras != loras_merged || dit->precision() != precision)) {
      if (dit_resident && dit && dit->precision() == precision) {
        const auto t_lora = clock_type::now();
        load_dit(req.loras, precision);
        run.res.timings.push_back({"lora_merge", seconds_since(t_lora)});
      } else {
        timed_load("dit", src.dit_file_bytes, [&] { load_dit(req.loras, precision); });
      }
    }
    run.res.lora_digest = lora_digest;
  }

  // The denoise phase: seeded noise (CPU generator, seeded per request: the same on every rank and for every rank
  // count), the DiT (loaded for it when it is not resident, freed after it), then the Euler loop on the denoise
  // ranks; every rank ends with the final rows and latents in `res`.
  SamplingSpec denoise(Run& run, const Encoded& enc, SamplingRows& rows) {
    Comm& comm = run.comm;
    const bool root = run.root;
    const PrecomputedInputs* pre = run.pre;
    const ResolvedRequest& req = run.res.request;
    const PhaseMeter meter(gpu);
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
    const DitConfig& dc = src.dit_config;
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
    switch_dit(run);

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
    phase_done(run, "denoise", t0, loads.size());
    meter.done("denoise", run.res);
    if (!dit_resident) free_dit();
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

  // The decode phase (every rank; units sharded over the group). The VAEs load with the video decode when not
  // resident. One rank with a GPU VAE streams the finished frames to the MP4's encoder (a CPU thread) while the GPU
  // decodes on.
  void decode(Run& run, const SamplingRows& rows, const SamplingSpec& spec, const std::string& out_path, Tensor& pixels,
              Tensor& wave, std::unique_ptr<StreamingMp4>& mp4) {
    Comm& comm = run.comm;
    Comm* group = comm.size() > 1 ? &comm : nullptr;
    run.check_cancel("before the video decode");
    const PhaseMeter video_meter(gpu);
    run.report("decode_video", 0, 1, Run::w_encode + Run::w_denoise, Run::w_video);
    if (!vvae) load_vaes();
    auto t0 = clock_type::now();
    if (comm.size() == 1 && !out_path.empty() && !opt.keep_media && vvae->device() == Device::cuda) {
      mp4 = std::make_unique<StreamingMp4>(out_path, media_spec(run.res.request), VideoVae::to_pixels01);
      const Tensor z = vvae->denormalize(run.res.video_latents.to(vvae->compute_dtype()));
      vvae->decode_streaming(z, [&](int64_t, const Tensor& frames) { mp4->add_frames(frames); });
    } else {
      pixels = decode_video_latents(*vvae, run.res.video_latents, group);
    }
    phase_done(run, "decode_video", t0, loads.size());
    video_meter.done("decode_video", run.res);
    run.check_cancel("before the audio decode");
    const PhaseMeter audio_meter(gpu);
    t0 = clock_type::now();
    run.report("decode_audio", 0, 1, Run::w_encode + Run::w_denoise + Run::w_video, Run::w_audio);
    wave = decode_audio_latents(*avae, rows_to_audio_latents(rows, spec), group);
    phase_done(run, "decode_audio", t0, loads.size());
    audio_meter.done("decode_audio", run.res);
    if (!vae_resident) {
      vvae.reset();
      avae.reset();
    }
    run.check_cancel("before writing");
  }

  MediaSpec media_spec(const ResolvedRequest& req) const {
    MediaSpec ms;
    ms.width = req.width;
    ms.height = req.height;
    ms.fps = static_cast<int>(kFps);
    ms.sample_rate = static_cast<int>(src.avae_config.sampling_rate);
    ms.channels = 2;
    ms.metadata["comment"] = req.to_json().dump();
    ms.metadata["title"] = req.prompt.substr(0, 200);
    ms.metadata["h3_seed"] = std::to_string(req.seed);
    return ms;
  }

  // The mux phase (rank 0): the MP4 (its frames already streamed to the encoder, or all of them now) and the
  // latents. The MP4 writer and write_safetensors are atomic; a failure removes what this request wrote.
  void write(Run& run, const std::string& out_path, const Tensor& pixels, const Tensor& wave, StreamingMp4* streamed) {
    GenerateResult& res = run.res;
    const ResolvedRequest& req = res.request;
    const auto t0 = clock_type::now();
    run.report("write", 0, 1, 100 - Run::w_write, Run::w_write);
    if (run.root && !out_path.empty()) {
      const std::string latents_path = fs::path(out_path).replace_extension(".latents.safetensors").string();
      std::map<std::string, std::string> md = {{"request", req.to_json().dump()}, {"generator", "h3 generate"}};
      if (streamed) {
        streamed->finish(wave);
        const StreamingMp4::Times& mt = streamed->times();
        spdlog::info(
            "mp4: the writer thread prepared the frames in {:.2f} s and encoded them in {:.2f} s; at the end it took "
            "{:.2f} s more for the last frames and {:.2f} s for the audio and trailer",
            mt.prepare, mt.encode, mt.finish_wait, mt.finish_tail);
      } else {
        Mp4Writer w(out_path, media_spec(req));
        // Rank 0 alone writes, so its own flag decides here: a cancel stops within one frame's encode, and the
        // destroyed writer removes its partial file.
        if (!w.add_frames(pixels, [&run] { return run.cancel && run.cancel->load(); }))
          throw Cancelled("request cancelled while writing the video");
        w.add_audio(wave);
        w.finish();
      }
      res.wrote_mp4 = true;
      res.out_path = out_path;
      if (opt.write_latents) {
        try {
          write_safetensors(latents_path,
                            {{"video_latents", res.video_latents}, {"audio_latent_rows", res.audio_latent_rows}}, md);
        } catch (...) {
          std::error_code ec;
          fs::remove(out_path, ec);
          throw;
        }
      }
    }
    phase_done(run, "mux", t0, loads.size());
  }

  // Whatever happens (a cancel, a failure), the models a request loaded for a phase are freed when it ends, so the
  // next request starts from the plan's resident set.
  void release_phase_models() {
    if (!dit_resident) free_dit();
    if (!vae_resident) vvae.reset(), avae.reset();
    try {
      if (gpu) gpu_release_cached();
    } catch (const std::exception& e) {  // a broken device: the next request reports it
      spdlog::warn("releasing the GPU's cached memory after a request: {}", e.what());
    }
  }
};

Generator::Generator(const ModelPaths& paths, const GenerateOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const auto t0 = clock_type::now();
  check_generate_options(options);
  m.opt = options;
  m.comm = options.comm ? options.comm : &world();
  m.gpu = options.device == Device::cuda;
  H3_CHECK(!m.gpu || gpu_backend_started(), "the generator on the GPU needs the GPU backend started (--device cuda)");
  Comm& comm = *m.comm;
  const int n = comm.size(), K = options.encoder_ranks;
  H3_CHECK(K >= 0 && (K == 0 || K < n),
           "--encoder-ranks {} needs at least one denoise rank besides them: use 0 (default) or 1..{} with {} "
           "ranks",
           K, n - 1, n);
  m.encoder_root = K > 0 ? n - K : 0;
  m.denoiser = comm.rank() < n - K;
  m.encoder = K > 0 ? !m.denoiser : true;  // K = 0: the whole group runs the tower, tensor-parallel

  m.src = open_model_sources(paths);
  m.described = m.src.described;
  const DitConfig& dc = m.src.dit_config;

  // Ranks: the denoise group and its DiT mesh.
  if (K > 0) m.role_comm = comm.split(m.denoiser ? 0 : 1, comm.rank());
  if (m.denoiser) {
    Comm* dcomm = m.denoise_comm();
    m.plan = dcomm->size() > 1 ? DistPlan::make(*dcomm, options.dist, dc.num_attention_heads, dc.ffn_dim)
                               : DistPlan::single();
    m.described.push_back(fmt::format(
        "denoise      {} rank(s){}, DiT {} on the {}", dcomm->size(), dcomm->size() > 1 ? ": " + m.plan.describe() : "",
        precision_name(options.precision), m.dit_device() == Device::cuda ? "GPU" : "CPU"));
  }

  // What stays loaded. CPU: the DiT and the VAEs (the text tower per request); GPU: the memory plan, for the largest
  // request the models accept when models are to stay resident.
  if (m.gpu) {
    m.device_bytes = agreed_device_bytes(comm);
    if (options.memory == MemoryPolicy::phases) {
      m.dit_resident = m.text_resident = m.vae_resident = false;
    } else {
      const MemoryPlan p =
          plan_memory_or_suggest(plan_inputs(m.src, options, largest_request(m.src.limits), n, m.device_bytes));
      H3_CHECK(options.memory != MemoryPolicy::resident || p.fits,
               "--memory-plan resident: the models do not fit the GPU beside the largest request: {}", p.problem);
      m.dit_resident = p.fits && p.dit_resident;
      m.text_resident = p.fits && p.text_resident;
      m.vae_resident = p.fits && p.vae_resident;
    }
  }
  if (m.denoiser && m.dit_resident)
    m.timed_load("dit", m.src.dit_file_bytes, [&] { m.load_dit({}, options.precision, false); });
  if (m.vae_resident) m.load_vaes();
  // The text tower stays on dedicated encoder ranks, or on every rank when the plan keeps it.
  if (K > 0 && m.encoder && m.src.text_problem.empty()) m.text = m.load_text(K > 1 ? m.role_comm.get() : nullptr);
  if (K == 0 && m.text_resident && m.src.text_problem.empty()) m.text = m.load_text(n > 1 ? &comm : nullptr);
  m.described.push_back(
      K > 0 ? fmt::format("encoder      {} dedicated rank(s) {}..{}, tensor-parallel over {}, the tower stays loaded",
                          K, comm.world_rank(n - K), comm.world_rank(n - 1),
                          std::min<int64_t>(K, m.src.text_config.n_kv_heads))
            : fmt::format("encoder      tensor-parallel over {} of {} rank(s), text tower on the {}, {}",
                          std::min<int64_t>(n, m.src.text_config.n_kv_heads), n,
                          m.text_device() == Device::cuda ? "GPU" : "CPU",
                          m.text ? "resident" : "loaded per request and freed before denoising"));
  if (n > 1) {  // by host (several hosts: which one encodes, which ones denoise)
    std::vector<int> enc, den;
    for (int r = 0; r < n; ++r) (r < n - K ? den : enc).push_back(comm.world_rank(r));
    if (K > 0) m.described.push_back("placement    encoder: " + hosts_of_ranks(enc));
    m.described.push_back(std::string("placement    ") + (K > 0 ? "denoise: " : "encoder and denoise: ") +
                          hosts_of_ranks(den));
  }
  if (m.gpu)
    m.described.push_back(
        fmt::format("memory       {} GiB of GPU memory per rank; resident: {}{}{}{}", m.device_bytes / kGiB,
                    m.dit_resident ? "DiT " : "", m.text ? "text tower " : "", m.vae_resident ? "VAEs" : "",
                    !m.dit_resident && !m.text && !m.vae_resident ? "none (each model per phase)" : ""));
  m.load_s = seconds_since(t0);
}

Generator::~Generator() = default;

const ModelLimits& Generator::limits() const {
  return impl_->src.limits;
}

ModelLimits Generator::limits_for(const ModelPaths& paths) {
  return model_limits_for(paths);
}

MemoryPlan Generator::memory_plan_for(const ModelPaths& paths, const GenerateOptions& options,
                                      const ResolvedRequest& req) {
  if (options.device != Device::cuda) {
    MemoryPlan none;
    none.fits = true;
    return none;
  }
  Comm& comm = options.comm ? *options.comm : world();
  const ModelSources src = open_model_sources(paths);
  const ModelLimits& lim = src.limits;
  GenerateOptions opt = options;
  if (!req.precision.empty()) opt.precision = precision_from_name(req.precision);
  MemoryPlanInputs in = plan_inputs(src, opt, req, comm.size(), agreed_device_bytes(comm));
  // A refusal names the longest video that fits at this canvas.
  auto at_frames = [&](int64_t frames) -> std::optional<MemoryPlanInputs> {
    GenerateRequest q;
    q.prompt = req.prompt;
    q.width = req.width;
    q.height = req.height;
    q.frames = frames;
    q.seed = req.seed;
    try {
      return plan_inputs(src, opt, resolve(q, lim), comm.size(), in.device_bytes);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  std::vector<int64_t> choices;
  for (int64_t f = lim.max_frames; f >= lim.min_frames; f -= kFramesPerChunk)
    if (f < req.frames) choices.push_back(f);
  return plan_memory_or_suggest(in, req.media.empty() ? FramesGeometry(at_frames) : FramesGeometry{}, choices);
}

MemoryPlan Generator::memory_plan(const ResolvedRequest& req) const {
  return impl_->plan_for(req);
}

std::vector<std::string> Generator::describe() const {
  return impl_->described;
}
bool Generator::procedural() const {
  return impl_->src.any_procedural;
}
int Generator::sample_rate() const {
  return static_cast<int>(impl_->src.avae_config.sampling_rate);
}
double Generator::load_seconds() const {
  return impl_->load_s;
}

GenerateResult Generator::run(const ResolvedRequest& req_in, const std::string& out_path, const ProgressFn& progress,
                              const std::atomic<bool>* cancel, const PrecomputedInputs* pre) {
  Impl& m = *impl_;
  Impl::Run run(*m.comm, progress, cancel, pre);
  GenerateResult& res = run.res;
  res.loads = std::move(m.loads);  // the constructor's loads are reported with the first request
  m.loads.clear();
  struct ReleasePhaseModels {
    Impl& m;
    ~ReleasePhaseModels() { m.release_phase_models(); }
  } release_phase_models{m};
  m.take_request(run, req_in);
  const Impl::Encoded enc = m.encode(run);
  SamplingRows rows;
  const SamplingSpec spec = m.denoise(run, enc, rows);
  Tensor pixels, wave;
  std::unique_ptr<StreamingMp4> mp4;
  m.decode(run, rows, spec, out_path, pixels, wave, mp4);
  m.write(run, out_path, pixels, wave, mp4.get());
  if (m.opt.keep_media) {
    res.pixels01 = pixels;
    res.waveform = wave;
  }
  // Every load of this request (and the constructor's, on the first) as one "load" entry, first.
  for (auto& l : m.loads) res.loads.push_back(std::move(l));
  m.loads.clear();
  double load_total = 0;
  for (const auto& l : res.loads) load_total += l.seconds;
  if (!res.loads.empty()) res.timings.insert(res.timings.begin(), {"load", load_total});
  run.report("done", 1, 1, 100, 0);
  return std::move(res);
}

}  // namespace h3

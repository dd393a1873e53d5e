// Generator: the components opened once (pipeline/components.h), the ranks given their roles (pipeline/rank_roles.h),
// the models loaded where and when the memory plan says (pipeline/residency.h), requests run many times, phase by
// phase (pipeline/phases.h): take the request, encode, denoise, decode, write.
#include "pipeline/generator.h"

#include <algorithm>
#include <chrono>
#include <optional>

#include "backend/backend.h"
#include "core/byte_size.h"
#include "distributed/placement.h"
#include "pipeline/components.h"
#include "pipeline/phases.h"
#include "pipeline/rank_roles.h"
#include "pipeline/residency.h"

namespace h3 {

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

GenerateOptions generate_options_from(Device device, const GenerateChoices& c) {
  GenerateOptions o = default_generate_options(device, c.precision);
  if (!c.vae_precision.empty()) o.vae_precision = precision_from_name(c.vae_precision);
  if (!c.text_precision.empty()) o.text_precision = precision_from_name(c.text_precision);
  if (!c.text_device.empty()) o.text_device = c.text_device == "cuda" ? Device::cuda : Device::cpu;
  if (o.text_device == Device::cpu && c.text_precision.empty()) o.text_precision = Precision::f32;
  o.memory = memory_policy_from_name(c.memory);
  if (!c.host_memory.empty()) o.host_bytes = parse_byte_size_or_fail(c.host_memory, "--host-memory");
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
  H3_CHECK(o.max_device_bytes >= 0, "--max-device-memory must not be negative (got {} bytes)", o.max_device_bytes);
  H3_CHECK(o.text_device == Device::cuda || o.text_precision != Precision::bf16,
           "--text-precision bf16 runs on the GPU only (--text-device cuda); the CPU runs the text tower in f32 or "
           "f64");
  H3_CHECK(o.text_device == Device::cpu || o.text_precision != Precision::f64,
           "--text-precision f64 runs on the CPU only (--text-device cpu); on the GPU use bf16 or f32");
}

double GenerateResult::median_call_seconds() const {
  if (call_seconds.empty()) return 0;
  std::vector<double> v(call_seconds.size() > 1 ? call_seconds.begin() + 1 : call_seconds.begin(), call_seconds.end());
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : 0.5 * (v[v.size() / 2 - 1] + v[v.size() / 2]);
}

double GenerateResult::time_to_mp4() const {
  double s = 0;
  for (const auto& t : timings)
    if (t.phase != "load" && t.phase != "lora_merge") s += t.seconds;
  return s;
}

struct Generator::Impl {
  Comm* comm = nullptr;
  RankRoles roles;
  std::unique_ptr<Comm> role_comm;  // the denoise ranks (or the encoder ranks) of `comm`
  std::optional<ModelResidency> models;
  std::vector<std::string> described;
  double load_s = 0;

  Comm* denoise_comm() { return roles.dedicated_encoders() ? role_comm.get() : comm; }
  Comm* encoder_comm() { return roles.K > 1 ? role_comm.get() : nullptr; }  // the dedicated encoders' tower group
  void describe_placement();
};

namespace {

// The DiT's mesh over the denoise ranks `dcomm` (collective over them).
DistPlan denoise_plan(Comm& dcomm, const DistOptions& dist, const DitConfig& dc) {
  return dcomm.size() > 1 ? DistPlan::make(dcomm, dist, dc.num_attention_heads, dc.ffn_dim) : DistPlan::single();
}

}  // namespace

// After the components' lines: the denoise ranks, the encoder ranks, the ranks by host and the GPU memory.
void Generator::Impl::describe_placement() {
  Comm& c = *comm;
  const int n = roles.n, K = roles.K;
  const ModelSources& src = models->sources();
  const ModelPlacement& where = models->placement();
  if (roles.denoiser) {
    const int dn = denoise_comm()->size();
    described.push_back(fmt::format(
        "denoise      {} rank(s){}, DiT {} on the {}", dn, dn > 1 ? ": " + models->dit_plan().describe() : "",
        precision_name(models->options().precision), where.dit.device == Device::cuda ? "GPU" : "CPU"));
  }
  described.push_back(
      K > 0 ? fmt::format("encoder      {} dedicated rank(s) {}..{}, tensor-parallel over {}, the tower stays loaded",
                          K, c.world_rank(n - K), c.world_rank(n - 1), std::min<int64_t>(K, src.text_config.n_kv_heads))
            : fmt::format("encoder      tensor-parallel over {} of {} rank(s), text tower on the {}, {}",
                          std::min<int64_t>(n, src.text_config.n_kv_heads), n,
                          where.text.device == Device::cuda ? "GPU" : "CPU",
                          models->text() ? "resident" : "loaded per request and freed before denoising"));
  if (n > 1) {  // by host (several hosts: which one encodes, which ones denoise)
    std::vector<int> enc, den;
    for (int r : roles.encoder_group()) enc.push_back(c.world_rank(r));
    for (int r : roles.denoise_group()) den.push_back(c.world_rank(r));
    if (K > 0) described.push_back("placement    encoder: " + hosts_of_ranks(enc));
    described.push_back(std::string("placement    ") + (K > 0 ? "denoise: " : "encoder and denoise: ") +
                        hosts_of_ranks(den));
  }
  if (models->gpu()) {
    const bool dit = where.dit.resident, vae = where.vae.resident, text = models->text() != nullptr;
    // A model kept with some of its layers (the rest stream in its phase) says how many.
    auto part = [](const LayerResidency& r, const char* unit) {
      return r.layers > 0 && r.kept < r.layers ? fmt::format(" ({} of {} {})", r.kept, r.layers, unit) : std::string();
    };
    described.push_back(fmt::format("memory       {} GiB of GPU memory per rank; resident: {}{}{}{}",
                                    where.device_bytes / kGiB,
                                    dit ? "DiT" + part(where.dit_layers, "blocks") + " " : "",
                                    text ? "text tower" + part(where.text_layers, "layers") + " " : "",
                                    vae ? "VAEs" : "", !dit && !text && !vae ? "none (each model per phase)" : ""));
  }
}

Generator::Generator(const ModelPaths& paths, const GenerateOptions& options) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  check_generate_options(options);
  m.comm = options.comm ? options.comm : &world();
  const bool gpu = options.device == Device::cuda;
  H3_CHECK(!gpu || gpu_backend_started(), "the generator on the GPU needs the GPU backend started (--device cuda)");
  Comm& comm = *m.comm;
  m.roles = rank_roles(comm.size(), options.encoder_ranks, comm.rank());

  ModelSources src = open_model_sources(paths);
  m.described = src.described;
  // Ranks: the denoise group and its DiT mesh; then what stays loaded where (GPU: the memory plan), and the loads.
  if (m.roles.dedicated_encoders()) m.role_comm = comm.split(m.roles.denoiser ? 0 : 1, comm.rank());
  DistPlan plan = m.roles.denoiser ? denoise_plan(*m.denoise_comm(), options.dist, src.dit_config) : DistPlan{};
  const ModelPlacement placement = decide_placement(src, options, comm);
  m.models.emplace(options, std::move(src), comm, m.roles, std::move(plan), placement);
  m.models->load_resident(m.encoder_comm());
  m.describe_placement();
  m.load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Generator::~Generator() = default;

const ModelLimits& Generator::limits() const {
  return impl_->models->sources().limits;
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
  return plan_request_memory(open_model_sources(paths), options, req, comm);
}

MemoryPlan Generator::memory_plan(const ResolvedRequest& req) const {
  return impl_->models->plan_for(req);
}

std::vector<std::string> Generator::describe() const {
  return impl_->described;
}
bool Generator::procedural() const {
  return impl_->models->sources().any_procedural;
}
int Generator::sample_rate() const {
  return static_cast<int>(impl_->models->sources().avae_config.sampling_rate);
}
double Generator::load_seconds() const {
  return impl_->load_s;
}

GenerateResult Generator::run(const ResolvedRequest& req_in, const std::string& out_path, const ProgressFn& progress,
                              const std::atomic<bool>* cancel, const PrecomputedInputs* pre, const RunHooks* hooks) {
  Impl& m = *impl_;
  ModelResidency& models = *m.models;
  RequestRun run(*m.comm, m.roles, progress, cancel, pre, hooks);
  GenerateResult& res = run.res;
  if (hooks && hooks->resume) {
    run.resume = std::dynamic_pointer_cast<const SuspendedGeneration>(hooks->resume);
    H3_CHECK(run.resume, "resume: the state was not made by a Generator's run");
    res = run.resume->res;  // what the first part recorded (its loads included)
    run.t_start -=
        std::chrono::duration_cast<phase_clock::duration>(std::chrono::duration<double>(run.resume->elapsed_s));
  }
  // The constructor's loads are reported with the first request.
  for (auto& l : models.take_loads()) res.loads.push_back(std::move(l));
  struct ReleasePhaseModels {
    ModelResidency& models;
    ~ReleasePhaseModels() { models.release_phase_models(); }
  } release_phase_models{models};

  take_request(run, models, run.resume ? run.resume->res.request : req_in);
  models.plan_request(res.memory_plan);  // the phases load as this request's plan says
  models.check_dit_streaming(res.request);
  const Encoded enc = run.resume ? run.resume->enc : encode_phase(run, models);
  const Denoised den = denoise_phase(run, models, enc);
  const Decoded media = decode_phase(run, models, den, out_path);
  write_phase(run, models, media, out_path);

  if (models.options().keep_media) {
    res.pixels01 = media.pixels;
    res.waveform = media.wave;
  }
  // Every load of this request (and the constructor's, on the first) as one "load" entry, first.
  for (auto& l : models.take_loads()) res.loads.push_back(std::move(l));
  double load_total = 0;
  for (const auto& l : res.loads) load_total += l.seconds;
  if (!res.loads.empty()) res.timings.insert(res.timings.begin(), {"load", load_total});
  run.report("done", 1, 1, 100, 0);
  return std::move(res);
}

}  // namespace h3

// The models of one rank held and loaded (residency.h); what to hold is decided in residency_plan.cpp.
#include "pipeline/residency.h"

#include <chrono>
#include <utility>

#include "backend/backend.h"
#include "core/host_memory.h"
#include "core/log.h"
#include "model/dit/lora.h"

namespace h3 {

namespace {

// The plan's layer residency (ModelPlacement::dit_layers / text_layers: `resident` layers spread among the streamed
// ones, `ring_slots` slots) as the models take it: -1 when every layer is resident. A model that stays loaded between
// requests is built with the layers the plan keeps (the other phases' room counts only those), one loaded for its
// phase with the phase's. No plan (layers 0): the model loads whole.
int resident_layers_for(const Placement& where, const LayerResidency& r) {
  if (r.layers == 0) return -1;
  const int n = where.resident ? r.kept : r.resident;
  return n >= r.layers ? -1 : n;
}
int ring_or_default(const LayerResidency& r) {
  return r.streamed() > 0 && r.ring_slots > 0 ? r.ring_slots : 3;
}

}  // namespace

ModelResidency::ModelResidency(const GenerateOptions& opt, ModelSources src, Comm& comm, const RankRoles& roles,
                               DistPlan plan, const ModelPlacement& placement)
    : opt_(opt), src_(std::move(src)), comm_(&comm), roles_(roles), plan_(std::move(plan)), placement_(placement) {}

template <typename Fn>
void ModelResidency::timed_load(const char* model, int64_t file_bytes, Fn&& fn) {
  using clock_type = std::chrono::steady_clock;
  const bool on_gpu = gpu();
  const auto t0 = clock_type::now();
  const int64_t before = on_gpu ? static_cast<int64_t>(gpu_in_use_bytes()) : 0;
  fn();
  if (on_gpu) gpu_synchronize();
  loads_.push_back({model, std::chrono::duration<double>(clock_type::now() - t0).count(), file_bytes,
                    on_gpu ? static_cast<int64_t>(gpu_in_use_bytes()) - before : 0});
}

void ModelResidency::load_resident(Comm* encoder_comm) {
  Comm& comm = *comm_;
  if (roles_.denoiser && placement_.dit.resident)
    timed_load("dit", src_.dit_file_bytes, [&] { load_dit({}, opt_.precision, false); });
  if (placement_.vae.resident) load_vaes();
  // The text tower stays on dedicated encoder ranks, or on every rank when the plan keeps it.
  if (roles_.K > 0 && roles_.encoder && src_.text_problem.empty()) text_ = load_text(encoder_comm);
  if (roles_.K == 0 && placement_.text.resident && src_.text_problem.empty())
    text_ = load_text(comm.size() > 1 ? &comm : nullptr);
  // Kept models hold no ring until their phase (a load starts the copies for a phase that follows at once).
  if (dit_) dit_->stop_streaming();
  if (text_) text_->stop_streaming();
}

Precision ModelResidency::precision_for(const ResolvedRequest& r) const {
  if (r.precision.empty()) return opt_.precision;
  const Precision p = precision_from_name(r.precision);
  if (placement_.dit.device == Device::cuda)
    H3_CHECK(p == Precision::bf16 || p == Precision::fp8,
             "precision {}: this generator runs its DiT on the GPU, in bf16 or fp8", r.precision);
  else
    H3_CHECK(p != Precision::fp8, "precision fp8: this generator runs its DiT on the CPU (f64, f32 or bf16)");
  return p;
}

MemoryPlan ModelResidency::plan_for(const ResolvedRequest& r) const {
  if (!gpu()) return MemoryPlan{};
  GenerateOptions o = opt_;
  o.precision = precision_for(r);
  MemoryPlanInputs in = plan_inputs(src_, o, r, comm_->size(), placement_.device_bytes, placement_.host_bytes);
  // What the constructor keeps: whole models, or (auto with streaming) some of the layers.
  KeptSet kept;
  auto kept_of = [](const Placement& where, const LayerResidency& layers, int all) {
    if (!where.resident) return 0;
    return layers.layers > 0 ? layers.kept : all;
  };
  kept.dit_blocks = kept_of(placement_.dit, placement_.dit_layers, src_.dit_config.num_layers);
  kept.text_layers = kept_of(placement_.text, placement_.text_layers, static_cast<int>(kConditioningLayer));
  kept.vaes = placement_.vae.resident;
  return plan_memory_kept(in, kept);
}

void ModelResidency::plan_request(const MemoryPlan& plan) {
  if (!gpu() || !plan.fits) return;
  placement_.dit_layers = plan.dit;
  placement_.text_layers = plan.text;
  placement_.vae_batch = plan.vae.batch;
  placement_.dit_source = park_source_of(plan, "denoise");
  placement_.text_source = park_source_of(plan, "encode");
}

// The host memory the plan had, for the models' refusals (the machine's total from core/host_memory.h).
HostMemory ModelResidency::planned_host() const {
  return HostMemory{host_memory().total, placement_.host_bytes};
}

DitStreaming ModelResidency::dit_streaming() const {
  return DitStreaming{.resident_blocks = resident_layers_for(placement_.dit, placement_.dit_layers),
                      .ring_slots = ring_or_default(placement_.dit_layers),
                      .source = placement_.dit_source,
                      .host = planned_host()};
}

void ModelResidency::check_dit_streaming(const ResolvedRequest& r) const {
  if (!roles_.denoiser || placement_.dit_source != ParkSource::mapped) return;
  const Device dev = placement_.dit.device;
  DitModel::check_streaming(DitCheckpoint::open(src_.dit_path), precision_for(r), plan_, dev,
                            dev == Device::cuda ? gpu_numerics() : Numerics{}, dit_streaming(), !r.loras.empty());
}

void ModelResidency::load_dit(const std::vector<GenerateRequest::LoraRef>& want, Precision precision,
                              bool for_request) {
  dit_.reset();  // free the old weights before the new ones are built
  loras_merged_.clear();
  lora_digest_ = 0;
  auto ck = std::make_unique<DitCheckpoint>(DitCheckpoint::open(src_.dit_path));
  std::vector<std::string> specs;
  for (const auto& l : want) specs.push_back(fmt::format("{}:{}", l.path, l.strength));
  if (for_request) add_loras(*ck, specs, comm_->world_rank(comm_->rank()));
  // On the GPU the DiT computes with the numerics the GPU backend was started with (deterministic mode, FP8
  // attention: core/numerics.h).
  const Device dev = placement_.dit.device;
  const DitStreaming streaming = dit_streaming();
  const int resident_blocks = streaming.resident_blocks;
  if (resident_blocks >= 0)
    spdlog::info("DiT: {} of {} blocks streamed from {}", placement_.dit_layers.layers - resident_blocks,
                 placement_.dit_layers.layers,
                 placement_.dit_source == ParkSource::mapped
                     ? fmt::format("the checkpoint {} (host memory short: {:.1f} GiB)", src_.dit_path,
                                   static_cast<double>(placement_.host_bytes) / kGiB)
                     : std::string("page-locked copies in host memory"));
  dit_ = std::make_unique<DitModel>(*ck, precision, plan_, dev, dev == Device::cuda ? gpu_numerics() : Numerics{},
                                    streaming);
  ckpt_ = std::move(ck);
  loras_merged_ = want;
  lora_digest_ = want.empty() ? 0 : ckpt_->lora_digest();
}

void ModelResidency::free_dit() {
  dit_.reset();
  ckpt_.reset();
}

ModelResidency::DitSwitch ModelResidency::switch_dit(const ResolvedRequest& req) {
  DitSwitch s;
  s.precision = precision_for(req);
  s.remerged = req.loras != loras_last_;
  loras_last_ = req.loras;
  if (roles_.denoiser && (!dit_ || req.loras != loras_merged_ || dit_->precision() != s.precision)) {
    if (placement_.dit.resident && dit_ && dit_->precision() == s.precision) {
      const auto t_lora = std::chrono::steady_clock::now();
      load_dit(req.loras, s.precision);
      s.lora_merge_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_lora).count();
    } else {
      timed_load("dit", src_.dit_file_bytes, [&] { load_dit(req.loras, s.precision); });
    }
  }
  s.lora_digest = lora_digest_;
  if (dit_) dit_->start_streaming_copies();  // a kept DiT's ring, given back after its last denoise
  return s;
}

void ModelResidency::load_vaes() {
  const Device dev = placement_.vae.device;
  timed_load("video_vae", src_.vvae_file_bytes, [&] { vvae_ = load_video_vae(src_, opt_.vae_precision, dev); });
  // The audio decoder runs in f32 on the GPU whatever the VAE precision (audio_vae.h).
  timed_load("audio_vae", src_.avae_file_bytes, [&] {
    avae_ = load_audio_vae(src_, opt_.vae_precision == Precision::bf16 ? Precision::f32 : opt_.vae_precision, dev);
  });
}

std::unique_ptr<Qwen3VlTextModel> ModelResidency::load_text(Comm* tp) {
  H3_CHECK(src_.text_problem.empty(), "{}", src_.text_problem);
  std::unique_ptr<Qwen3VlTextModel> t;
  timed_load("text", text_file_bytes(src_, kConditioningLayer), [&] {
    t = std::make_unique<Qwen3VlTextModel>(
        *src_.text_weights, src_.text_config, kConditioningLayer,
        Qwen3VlTextOptions{.precision = opt_.text_precision,
                           .device = placement_.text.device,
                           .comm = tp,
                           .resident_layers = resident_layers_for(placement_.text, placement_.text_layers),
                           .ring_slots = ring_or_default(placement_.text_layers),
                           .park_source = placement_.text_source,
                           .host = planned_host()});
  });
  return t;
}

std::unique_ptr<Qwen3VlVisionModel> ModelResidency::load_vision(const Qwen3VlVisionConfig& vc) {
  std::unique_ptr<Qwen3VlVisionModel> vision;
  timed_load("vision", 0, [&] {
    vision = std::make_unique<Qwen3VlVisionModel>(*src_.text_weights, vc,
                                                  Qwen3VlVisionOptions{opt_.text_precision, placement_.text.device});
  });
  return vision;
}

ModelResidency::VaeEncoders ModelResidency::vae_encoders() {
  VaeEncoders e;
  const Precision ep = opt_.vae_precision == Precision::f64 ? Precision::f64 : Precision::f32;
  if (!vvae_)
    timed_load("video_vae", src_.vvae_file_bytes, [&] { e.own_video = load_video_vae(src_, ep, Device::cpu); });
  if (!avae_)
    timed_load("audio_vae", src_.avae_file_bytes, [&] { e.own_audio = load_audio_vae(src_, ep, Device::cpu); });
  e.video = vvae_ ? vvae_.get() : e.own_video.get();
  e.audio = avae_ ? avae_.get() : e.own_audio.get();
  return e;
}

void ModelResidency::after_encode() {
  if (text_) text_->stop_streaming();
}

void ModelResidency::after_denoise() {
  if (!placement_.dit.resident)
    free_dit();
  else if (dit_)
    dit_->stop_streaming();
}

void ModelResidency::after_decode() {
  if (!placement_.vae.resident) {
    vvae_.reset();
    avae_.reset();
  }
}

void ModelResidency::release_phase_models() {
  try {  // a request that failed or was cancelled mid-phase: a kept model's ring goes back as after its phase
    if (text_) text_->stop_streaming();
    if (dit_ && placement_.dit.resident) dit_->stop_streaming();
  } catch (const std::exception& e) {
    spdlog::warn("giving a kept model's streaming ring back after a request: {}", e.what());
  }
  if (!placement_.dit.resident) free_dit();
  if (!placement_.vae.resident) vvae_.reset(), avae_.reset();
  try {
    if (gpu()) gpu_release_cached();
  } catch (const std::exception& e) {  // a broken device: the next request reports it
    spdlog::warn("releasing the GPU's cached memory after a request: {}", e.what());
  }
  if (gpu()) gpu_trim_pinned();  // the page-locked blocks kept between the request's models
}

std::vector<LoadTiming> ModelResidency::take_loads() {
  std::vector<LoadTiming> l = std::move(loads_);
  loads_.clear();
  return l;
}

}  // namespace h3

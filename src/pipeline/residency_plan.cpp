// What each rank keeps loaded and where (residency.h): the memory plan's inputs from the models and a request, and
// its decisions turned into a ModelPlacement.
#include <algorithm>
#include <functional>
#include <optional>
#include <tuple>

#include "backend/backend.h"
#include "backend/budget.h"
#include "core/host_memory.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/vision.h"
#include "pipeline/conditions.h"
#include "pipeline/geometry.h"
#include "pipeline/residency.h"

namespace h3 {

namespace {

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

}  // namespace

ParkSource park_source_of(const MemoryPlan& plan, const std::string& phase) {
  for (const PhaseMemory& ph : plan.phases)
    if (ph.phase == phase) return ph.from_checkpoint ? ParkSource::mapped : ParkSource::pinned;
  return ParkSource::pinned;
}

int64_t agreed_device_bytes(Comm& comm) {
  const std::string bus = gpu_bus_id();
  const uint64_t mine = bus.empty() ? 0 : std::hash<std::string>{}(bus);
  std::vector<uint64_t> buses(static_cast<size_t>(comm.size()));
  comm.allgatherv(&mine, buses.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "GPU bus ids (memory plan)");
  int64_t sharing = 0;
  for (uint64_t b : buses) sharing += b == mine;
  // What this rank may plan for: its share of what was free when the backend started (never the card's total, so
  // memory other processes hold is never planned for), and never more than the backend's budget (the allocator's
  // cap plus what the process takes outside it: backend/budget.h). Ranks sharing a GPU without a budget each get
  // their share, and their allocators are capped to it; with --max-device-memory each rank has the budget given.
  const int64_t share = gpu_free_at_start_bytes() / std::max<int64_t>(sharing, 1);
  const int64_t budget = gpu_budget_bytes() + kGpuOutsideAllocatorBytes;
  const int64_t own = std::min(share, budget);
  if (sharing > 1 && own < budget)
    set_gpu_budget_bytes(own - kGpuOutsideAllocatorBytes,
                         fmt::format("{} ranks share this GPU's {:.2f} GiB free at start", sharing,
                                     static_cast<double>(gpu_free_at_start_bytes()) / kGiB));
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgatherv(&own, all.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "GPU memory (memory plan)");
  return *std::min_element(all.begin(), all.end());
}

int64_t agreed_host_bytes(Comm& comm, int64_t given) {
  const uint64_t mine = std::hash<std::string>{}(comm.host());
  std::vector<uint64_t> hosts(static_cast<size_t>(comm.size()));
  comm.allgatherv(&mine, hosts.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "host names (memory plan)");
  int64_t sharing = 0;
  for (uint64_t h : hosts) sharing += h == mine;
  const int64_t own = given > 0 ? given : host_memory().available / std::max<int64_t>(sharing, 1);
  std::vector<int64_t> all(static_cast<size_t>(comm.size()));
  comm.allgatherv(&own, all.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "host memory (memory plan)");
  return *std::min_element(all.begin(), all.end());
}

MemoryPlanInputs plan_inputs(const ModelSources& s, const GenerateOptions& o, const ResolvedRequest& r, int world,
                             int64_t device_bytes, int64_t host_bytes) {
  MemoryPlanInputs in;
  in.dit = s.dit_config;
  in.dit_on_gpu = o.device == Device::cuda && (o.precision == Precision::bf16 || o.precision == Precision::fp8);
  in.dit_precision = o.precision;
  in.mode = o.dist.mode;
  const int denoise = world - o.encoder_ranks;
  std::tie(in.K, in.U) = dit_mesh(o.dist, std::max(denoise, 1));
  in.video_vae = s.vvae_config;
  in.audio_vae = s.avae_config;
  in.vae_on_gpu = o.device == Device::cuda && o.vae_precision != Precision::f64;
  in.vae_precision = o.vae_precision;
  in.text = s.text_config;
  in.text_layers = kConditioningLayer;
  in.text_precision = o.text_precision;
  in.text_tp = text_tp_ranks(world, o.encoder_ranks, s.text_config.n_kv_heads);
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
  in.host_bytes = host_bytes;
  // An explicit budget, lowered to this rank's share where ranks share the GPU (agreed_device_bytes: the backend's
  // cap was lowered the same way, so the plan and the allocator agree).
  in.budget_bytes =
      o.max_device_bytes > 0 && device_bytes > 0 ? std::min(o.max_device_bytes, device_bytes) : o.max_device_bytes;
  in.policy = o.memory;
  in.stream_layers = o.stream_layers;
  return in;
}

ModelPlacement placement_from_plan(const MemoryPlan& plan, const GenerateOptions& opt, int64_t device_bytes,
                                   int64_t host_bytes) {
  const bool gpu = opt.device == Device::cuda;
  ModelPlacement p;
  p.dit.device =
      gpu && (opt.precision == Precision::bf16 || opt.precision == Precision::fp8) ? Device::cuda : Device::cpu;
  p.vae.device = gpu && opt.vae_precision != Precision::f64 ? Device::cuda : Device::cpu;
  p.text.device = gpu && opt.text_device == Device::cuda ? Device::cuda : Device::cpu;
  // A model of which the plan keeps some layers (auto under a budget) stays loaded between requests with those layers
  // on the device; the rest stream in its phase (residency.cpp: resident_layers_for).
  p.dit.resident = plan.fits && (plan.dit_resident || plan.kept.dit_blocks > 0);
  p.text.resident = plan.fits && (plan.text_resident || plan.kept.text_layers > 0);
  p.vae.resident = plan.fits && plan.vae_resident;
  p.device_bytes = device_bytes;
  p.host_bytes = host_bytes;
  if (plan.fits) {
    p.dit_layers = plan.dit;
    p.text_layers = plan.text;
    p.vae_batch = plan.vae.batch;
    p.dit_source = park_source_of(plan, "denoise");
    p.text_source = park_source_of(plan, "encode");
  }
  return p;
}

ModelPlacement decide_placement(const ModelSources& src, const GenerateOptions& opt, Comm& comm) {
  if (opt.device != Device::cuda) {  // the CPU: the DiT and the VAEs once, the text tower per request
    MemoryPlan cpu;
    cpu.fits = cpu.dit_resident = cpu.vae_resident = true;
    return placement_from_plan(cpu, opt, 0);
  }
  const int64_t device_bytes = agreed_device_bytes(comm);
  const int64_t host_bytes = agreed_host_bytes(comm, opt.host_bytes);
  MemoryPlan plan;  // policy phases: nothing resident
  if (opt.memory != MemoryPolicy::phases) {
    plan = plan_memory_or_suggest(
        plan_inputs(src, opt, largest_request(src.limits), comm.size(), device_bytes, host_bytes));
    H3_CHECK(opt.memory != MemoryPolicy::resident || plan.fits,
             "--memory-plan resident: the models do not fit the GPU beside the largest request: {}", plan.problem);
  }
  return placement_from_plan(plan, opt, device_bytes, host_bytes);
}

MemoryPlan plan_request_memory(const ModelSources& src, const GenerateOptions& options, const ResolvedRequest& req,
                               Comm& comm) {
  const ModelLimits& lim = src.limits;
  GenerateOptions opt = options;
  if (!req.precision.empty()) opt.precision = precision_from_name(req.precision);
  const int64_t device_bytes = agreed_device_bytes(comm);
  MemoryPlanInputs in = plan_inputs(src, opt, req, comm.size(), device_bytes, agreed_host_bytes(comm, opt.host_bytes));
  // A refusal names the longest video that fits at this canvas.
  auto at_frames = [&](int64_t frames) -> std::optional<MemoryPlanInputs> {
    GenerateRequest q;
    q.prompt = req.prompt;
    q.width = req.width;
    q.height = req.height;
    q.frames = frames;
    q.seed = req.seed;
    try {
      return plan_inputs(src, opt, resolve(q, lim), comm.size(), in.device_bytes, in.host_bytes);
    } catch (const Error&) {
      return std::nullopt;
    }
  };
  std::vector<int64_t> choices;
  for (int64_t f = lim.max_frames; f >= lim.min_frames; f -= kFramesPerChunk)
    if (f < req.frames) choices.push_back(f);
  return plan_memory_or_suggest(in, req.media.empty() ? FramesGeometry(at_frames) : FramesGeometry{}, choices);
}

}  // namespace h3

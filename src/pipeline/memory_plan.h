// The device-memory plan of one GPU rank under a budget: which models (or parts of them) stay on the device between
// requests, what each phase of a request holds at its peak, what it streams over the host link and what that costs,
// computed from the model configs (memory_sizes.h), the request geometry and the budget before anything is loaded.
//
// The budget (--max-device-memory, or H3_MAX_DEVICE_MEMORY) is what this rank may take of its GPU, its CUDA context
// and libraries included; without one it is what is free on the device at start less kDefaultDeviceMargin
// (default_device_budget). A budget larger than what is free is refused. Inside it, kRuntimeReserve is left to what
// takes device memory outside h3's caching allocator (CUDA context, library handles and loaded kernels, NCCL's
// buffers): the plan's tensors get budget - reserve (its "room"), which is the allocator's cap (backend/budget.h), so
// the plan and the allocator's refusal agree byte for byte.
//
// A request runs three phases on the GPU: encode (the Qwen3-VL text tower, and the vision tower for pictures),
// denoise (the DiT, model_calls forwards) and decode (the video VAE's decoder, then the audio VAE's). The DiT's
// blocks and the text tower's decoder layers are layers that may stream: during its phase a model has `resident`
// layers on the device (spread evenly among the others) and the rest parked in pinned host memory, copied on their
// own stream through a ring of `ring_slots` device slots (each the size of one layer) ahead of the compute. The rest
// of the model (the DiT outside its blocks, the tower's embeddings) is on the device through its phase. The VAEs do
// not stream: their decode stacks as many units as the room left allows (bitwise the same result for any batch).
// A phase's peak:
//   peak(phase) = kept (every model's part kept between requests) + the phase model's other on-device weights
//                 + ring + activations
// and the plan fits when every peak is within the room. Policies (what is kept between requests):
//   phases    nothing (h3 generate's one request): each phase loads its model, as many layers resident as fit;
//   resident  everything, whole (refused when it does not fit, naming auto / phases);
//   auto      (h3 serve) the most that fits: first DiT blocks (as many as its phase holds), then the VAEs and then
//             text layers while they cost the DiT no resident block.
// The minimum budget of a request is its phases plan with every layer streamed through the smallest ring (2 slots)
// and a one-unit VAE batch; a budget below it is refused naming it.
//
// Streaming cost: a phase copies streamed_bytes() per pass (encode 1 pass, denoise model_calls) at the link's rate
// (default kH200LinkGBps, the H200's measured pinned host->device copies). When the compute seconds of a DiT forward
// are known the copies overlap it: slowdown per forward = max(0, copy - compute) + one layer's copy (the wait before
// the first streamed layer); unknown compute (and the text tower's encode) counts every copy second, an upper bound.
// Host memory: the streamed layers live in pinned host memory (phases: the phase model's streamed part, plus the
// blocks of earlier phases the page-locked pool keeps until the request ends; auto / resident: every model's part not
// kept, all the time); when the phase model's part and kParkHostMarginBytes exceed the
// host memory given (io/layer_stream.h's rule, pinned_copies_fit, which the models' streamers follow), the phase
// streams from the memory-mapped checkpoint through a pinned staging ring of ring_slots layers instead, at the disk's
// rate (disk_gbps); a ring that does not fit with the margin either is refused. The models take the choice as data
// (residency.h: ModelPlacement's park sources) and refuse a checkpoint whose stored bytes are not the device's.
#pragma once
#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "backend/budget.h"
#include "pipeline/memory_sizes.h"

namespace h3 {

enum class MemoryPolicy { automatic, resident, phases };
std::string_view memory_policy_name(MemoryPolicy p);
MemoryPolicy memory_policy_from_name(const std::string& s);  // "auto", "resident" or "phases"; throws otherwise

// The two numbers of the device budget, the same as backend/budget.h's (the allocator applies them; the plan counts
// with them): kRuntimeReserve = kGpuOutsideAllocatorBytes, what the process takes outside the caching allocator
// (CUDA context ~0.5 GiB with lazy loading, cuBLASLt / cuDNN handles and kernels, NCCL buffers), and
// kDefaultDeviceMargin = kGpuDefaultMarginBytes, left free for other processes when no budget is given.
inline constexpr int64_t kRuntimeReserve = kGpuOutsideAllocatorBytes;
inline constexpr int64_t kDefaultDeviceMargin = kGpuDefaultMarginBytes;
inline constexpr double kH200LinkGBps = 55.5;  // pinned host -> device copies measured on an H200 (GB/s)
inline constexpr double kDiskGBps = 1.4;       // the H200 host's local disk, page cache dropped (GB/s)
inline constexpr int kDefaultRingSlots = 3, kMinRingSlots = 2;
// Host memory beside the pinned weights: the process with the CUDA libraries mapped, the tokenizer, the sampler's
// latents, the MP4 writer. A resident 768p run's RSS was 0.5-0.7 GiB in encode and denoise and 2.8-2.9 GiB in the
// decodes, whose 1.43 GiB of frames the plan counts apart (H100).
inline constexpr int64_t kHostProcessBytes = 2 * kGiB;

// The budget when none is given: what is free on the device at start less kDefaultDeviceMargin (at least 0).
int64_t default_device_budget(int64_t free_bytes);

struct MemoryPlanInputs {
  DitConfig dit;
  bool dit_on_gpu = true;  // false: the DiT runs on the CPU (f32 / f64), holding no device memory
  Precision dit_precision = Precision::bf16;
  DistMode mode = DistMode::ulysses;
  int K = 1, U = 1;  // the denoise ranks' mesh (DistPlan)
  VideoVaeConfig video_vae;
  AudioVaeConfig audio_vae;
  bool vae_on_gpu = true;
  Precision vae_precision = Precision::bf16;
  Qwen3VlTextConfig text;
  int64_t text_layers = 50;
  Precision text_precision = Precision::f32;
  int text_tp = 1;
  bool text_on_gpu = true;      // false: the tower runs on the CPU (it holds no device memory)
  int64_t vision_bytes = 0;     // the vision tower's weights when the request has pictures and it runs on the GPU
  bool text_elsewhere = false;  // the tower lives on dedicated encoder ranks (--encoder-ranks K > 0)

  // The request (or, for a server, the largest request it accepts).
  int64_t seq_len = 0;  // packed rows S
  int64_t text_tokens = 0;
  int64_t latent_frames = 0, latent_h = 0, latent_w = 0, audio_latents = 0;
  int dit_calls = 49;                         // DiT forwards (steps - 1)
  int64_t width = 0, height = 0, frames = 0;  // pixels and frames, for messages (0: said in latents)

  int64_t device_bytes = 0;   // memory free on this rank's GPU at start (its share when ranks share one); 0 unknown
  int64_t budget_bytes = 0;   // what this rank may use (--max-device-memory); 0: default_device_budget(device_bytes)
  int64_t reserve_bytes = 0;  // inside the budget, for what the plan does not count; 0: kRuntimeReserve
  MemoryPolicy policy = MemoryPolicy::phases;

  bool stream_layers = true;           // false: every layer resident (models that load whole), or no fit
  int ring_slots = kDefaultRingSlots;  // a streamed model's ring (at least kMinRingSlots; fewer when tight)
  double link_gbps = kH200LinkGBps;    // host -> device copies of pinned memory, GB/s
  double dit_forward_s = 0;            // compute seconds of one DiT forward on this rank; 0 unknown
  int64_t host_bytes = 0;              // host memory this rank may use; 0 unknown (pinned copies assumed)
  double disk_gbps = kDiskGBps;        // the checkpoint's read rate when streaming from it
};

// How a model of layers sits on the device through its phase; the model takes it as data (the streamer's ring of
// ring_slots slots of layer_bytes, the resident layers spread evenly among the streamed ones).
struct LayerResidency {
  int layers = 0;           // layers the model runs (DiT blocks; text decoder layers)
  int resident = 0;         // on the device through the phase
  int kept = 0;             // of those, kept on the device between requests (kept <= resident)
  int ring_slots = 0;       // 0 when every layer is resident
  int64_t layer_bytes = 0;  // one layer on this rank (a ring slot)
  int streamed() const { return layers - resident; }
  int64_t streamed_bytes() const { return int64_t{streamed()} * layer_bytes; }
  int64_t ring_bytes() const { return int64_t{ring_slots} * layer_bytes; }
};
using DitResidency = LayerResidency;   // the DiT's transformer blocks (the rest of it is on the device in denoise)
using TextResidency = LayerResidency;  // the text tower's decoder layers (its embeddings on the device in encode)

// The VAE decode under the budget: the bytes its stacked units may take (VideoVae's batch = stack_bytes / the unit's
// bytes, 1..32, instead of a quarter of the device) and whether the decoders stay loaded between requests.
struct VaeBudget {
  bool kept = false;
  int64_t stack_bytes = 0;
  int64_t batch = 0;  // units of this request's largest shape per stacked call
};

// What stays on the device between requests: DiT blocks (with the rest of the DiT when > 0), text decoder layers
// (with the embeddings when > 0), the VAE decoders.
struct KeptSet {
  int dit_blocks = 0, text_layers = 0;
  bool vaes = false;
  bool operator==(const KeptSet&) const = default;
};

struct PhaseMemory {
  std::string phase;  // "encode", "denoise", "decode"
  std::string model;  // the model the phase runs ("" when kept whole or on the CPU)
  // resident: bytes kept between requests (every model's); weights: the phase model's other bytes on the device.
  int64_t resident = 0, weights = 0, ring = 0, activations = 0;
  int64_t streamed = 0;          // bytes copied over the link per pass
  int passes = 0;                // encode 1, denoise model_calls
  double copy_s = 0;             // seconds of copies per pass
  double gbps = 0;               // the copies' rate (the link's, or the disk's when streaming from the checkpoint)
  double slowdown_s = 0;         // expected seconds the request loses to streaming in this phase (all passes)
  double compute_s = 0;          // compute seconds per pass when known (0 unknown)
  int64_t host_pinned = 0;       // pinned host memory for streamed (and not kept) weights during the phase
  int64_t host_pool = 0;         // page-locked bytes held through the phase: host_pinned and what the pool keeps
                                 // from the request's earlier phases (plan_host's note)
  int64_t host_bytes = 0;        // the host need of the phase: host_pool + kHostProcessBytes + decoded frames
  bool from_checkpoint = false;  // streams from the mapped checkpoint (host memory short), at the disk's rate
  int64_t peak() const { return resident + weights + ring + activations; }
};

struct MemoryPlan {
  MemoryPolicy policy = MemoryPolicy::phases;  // as asked
  KeptSet kept;
  bool dit_resident = false, text_resident = false, vae_resident = false;  // kept whole between requests
  bool text_on_gpu = true;
  int64_t dit_weights = 0, text_weights = 0, vae_weights = 0;  // video + audio decoders
  DitResidency dit;
  TextResidency text;
  VaeBudget vae;
  std::vector<PhaseMemory> phases;
  int64_t device_bytes = 0, budget_bytes = 0, reserve_bytes = 0;
  int64_t minimum_bytes = 0;   // the least budget this request runs in (its phases plan, every layer streamed)
  std::string minimum_detail;  // what makes it up: "denoise: DiT outside its blocks 1.6 + ring 2 x 0.84 + ..."
  double link_gbps = 0;
  int64_t host_limit_bytes = 0;  // the host memory planned with (MemoryPlanInputs::host_bytes; 0 unlimited)
  bool host_short = false;       // a phase's staging ring does not fit the host memory either
  bool fits = false;
  std::string problem;  // when it does not fit: why, the minimum, and what would fit

  int64_t room() const { return budget_bytes - reserve_bytes; }
  int64_t peak() const;
  int64_t host_peak() const;
  double slowdown_s() const;  // summed over the phases
  const PhaseMemory& phase(const std::string& name) const;
  // One line with the budget and what is kept, one per phase (its peak, resident and streamed parts, the cost).
  std::vector<std::string> describe() const;
  nlohmann::json to_json() const;
};

// The plan for `in` under its policy (no suggestions when it does not fit; see plan_memory_or_suggest).
MemoryPlan plan_memory(const MemoryPlanInputs& in);
// The phases' residency with a kept set already chosen: a generator plans each request against what it keeps.
MemoryPlan plan_memory_kept(const MemoryPlanInputs& in, const KeptSet& kept);
// The same with each model kept whole or not at all.
MemoryPlan plan_memory_resident(const MemoryPlanInputs& in, bool dit, bool text, bool vae);
// The request's inputs at another frame count (its packed length and latent sizes), or nullopt when that count is
// not allowed; lets a refusal name the longest video that fits.
using FramesGeometry = std::function<std::optional<MemoryPlanInputs>(int64_t frames)>;
// The same; when it does not fit, `problem` also says what would: auto or phases instead of resident, FP8 instead of
// bf16, the text tower in bf16 or on the CPU, (given `at_frames` and the allowed counts `frame_choices`, longest
// first) the most frames that fit at this canvas, or tensor parallelism over the fewest ranks that fit.
MemoryPlan plan_memory_or_suggest(const MemoryPlanInputs& in, const FramesGeometry& at_frames = {},
                                  const std::vector<int64_t>& frame_choices = {});

}  // namespace h3

// Which of the generator's models are loaded, where, and for how long (memory_plan.h), and the loads themselves.
//
// Deciding (residency_plan.cpp). On the CPU the DiT and the VAEs are loaded by the constructor and kept, the text
// tower is loaded per request. On the GPU the constructor loads what the plan keeps resident (auto: planned for the
// largest request the models accept) and every request is planned before it loads anything: one that cannot fit is
// refused with the reason. The decisions reach the loads as data, one ModelPlacement per rank.
//
// Holding (residency.cpp). A model that is not resident is loaded for its phase (timed as a load, not as the phase)
// and freed after it, and the allocator's cached blocks go back to the device so the next phase's model finds the
// memory. The DiT holds the request's LoRAs, merged into the pristine checkpoint (re-opened, memory-mapped) whenever
// the set changes, so deltas never accumulate.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "distributed/comm.h"
#include "distributed/plan.h"
#include "model/dit/checkpoint.h"
#include "model/dit/dit.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/vision.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"
#include "pipeline/components.h"
#include "pipeline/generator.h"
#include "pipeline/memory_plan.h"
#include "pipeline/rank_roles.h"
#include "pipeline/request.h"

namespace h3 {

inline constexpr int64_t kConditioningLayer = 50;  // H3 conditions on hidden_states[50]

// Where one model runs and whether it stays loaded between requests.
struct Placement {
  Device device = Device::cpu;
  bool resident = false;
};

// This rank's placement of every model: what the loads read, and the only thing they read, about where a model
// goes and how long it stays. `text.resident` is the plan's (K = 0: the tower kept on every rank); dedicated encoder
// ranks keep their tower by role (rank_roles.h).
struct ModelPlacement {
  Placement dit, text, vae;  // vae: the video and audio decoders together
  int64_t device_bytes = 0;  // the GPU memory this rank may use (agreed over the group; 0 on the CPU)
  // The plan's layers through their phase (memory_plan.h): the DiT's blocks and the text tower's decoder layers,
  // resident (spread among the streamed ones), kept between requests, and the ring of slots the others stream
  // through. Empty (layers 0) on the CPU or when no plan was made: the model loads whole. The constructor's
  // placement has the plan for the largest request; each request's placement (ModelResidency::plan_request) its own.
  LayerResidency dit_layers, text_layers;
  int64_t vae_batch = 0;  // units per stacked VAE decode call under the budget (0: the VAE's own rule)
  // The host memory this rank may use (agreed over the group; 0 on the CPU) and where each model's streamed layers
  // wait in its phase: page-locked copies, or (the plan's from_checkpoint: host memory short) the checkpoint, read at
  // each copy (io/layer_stream.h). The models refuse a mapped source whose stored bytes are not the device's.
  int64_t host_bytes = 0;
  ParkSource dit_source = ParkSource::pinned, text_source = ParkSource::pinned;
};

// The GPU memory this rank may plan with: the device's, divided among the ranks that share it (same PCI bus id), the
// smallest over the group so every rank plans alike. Collective over `comm`.
int64_t agreed_device_bytes(Comm& comm);
// The host memory this rank may plan with: `given` (GenerateOptions::host_bytes, --host-memory) when > 0, else its
// share of what the host has available now (core/host_memory.h) among the ranks on the same host; the smallest over
// the group. Collective over `comm`.
int64_t agreed_host_bytes(Comm& comm, int64_t given);
// The plan's inputs for one request (or the largest one a server accepts): models, precisions, placement, packed
// length, this rank's device and host memory.
MemoryPlanInputs plan_inputs(const ModelSources& s, const GenerateOptions& o, const ResolvedRequest& r, int world,
                             int64_t device_bytes, int64_t host_bytes = 0);
// The placement of a generator's models (collective over `comm` on the GPU: the agreed device memory). CPU: the DiT
// and the VAEs resident, the text tower per request. GPU, policy phases: nothing resident; auto and resident: the plan
// for the largest request the models accept (resident refuses when it does not fit).
ModelPlacement decide_placement(const ModelSources& src, const GenerateOptions& opt, Comm& comm);
// Where the model of `phase` ("encode": the text tower, "denoise": the DiT) streams from under `plan`.
ParkSource park_source_of(const MemoryPlan& plan, const std::string& phase);
// A plan's decisions as a placement (the devices from the options): nothing resident when the plan does not fit.
ModelPlacement placement_from_plan(const MemoryPlan& plan, const GenerateOptions& opt, int64_t device_bytes,
                                   int64_t host_bytes = 0);
// Generator::memory_plan_for: the plan of `req` on this rank's GPU (collective over `comm`), a refusal naming the
// longest video that fits at its canvas.
MemoryPlan plan_request_memory(const ModelSources& src, const GenerateOptions& options, const ResolvedRequest& req,
                               Comm& comm);

// The models of one rank and their loads. Constructed once per Generator; the phases (pipeline/phases.h) read the
// loaded models and call the loads.
class ModelResidency {
 public:
  // `plan`: the DiT's mesh over the denoise ranks. Loads nothing (load_resident does).
  ModelResidency(const GenerateOptions& opt, ModelSources src, Comm& comm, const RankRoles& roles, DistPlan plan,
                 const ModelPlacement& placement);

  // The constructor's loads: the resident DiT (denoise ranks) and VAEs, and the text tower where it stays (dedicated
  // encoder ranks, tensor-parallel over `encoder_comm`, null = alone; or every rank when the plan keeps it, over the
  // group). Collective.
  void load_resident(Comm* encoder_comm);

  const GenerateOptions& options() const { return opt_; }
  const ModelSources& sources() const { return src_; }
  const ModelPlacement& placement() const { return placement_; }
  const DistPlan& dit_plan() const { return plan_; }
  bool gpu() const { return opt_.device == Device::cuda; }

  // Loaded models (null when not loaded).
  const DitModel* dit() const { return dit_.get(); }
  const VideoVae* video_vae() const { return vvae_.get(); }
  const AudioVae* audio_vae() const { return avae_.get(); }
  const Qwen3VlTextModel* text() const { return text_.get(); }

  // The DiT precision of `r`: its own when it names one (on the device this generator runs its DiT on), else the
  // generator's.
  Precision precision_for(const ResolvedRequest& r) const;
  // The plan `r` runs under with this residency (empty on the CPU).
  MemoryPlan plan_for(const ResolvedRequest& r) const;
  // The request's plan becomes the placement its phases load by: the layers resident and streamed in each phase
  // and the VAE batch (what is kept between requests stays the constructor's). Call before the request loads.
  void plan_request(const MemoryPlan& plan);
  // After plan_request, before the request's first phase: the DiT that switch_dit will build for `r` takes the
  // plan's streaming. A DiT streamed from a checkpoint whose bytes are not the device's is refused here, from the
  // headers, instead of when it loads after the encode.
  void check_dit_streaming(const ResolvedRequest& r) const;

  // What switch_dit did for a request.
  struct DitSwitch {
    Precision precision = Precision::f32;  // the DiT's for the request
    bool remerged = false;                 // its LoRA set differs from the last request's
    std::optional<double> lora_merge_s;    // a resident DiT re-merged for LoRAs (timed as lora_merge, not a load)
    uint64_t lora_digest = 0;              // of the LoRAs merged (0 = none)
  };
  // The DiT for `req`: LoRAs and precision. The denoise ranks (re-)merge from the pristine weights when the set
  // changes (every rank sees the same request, so all decide alike; the DitModel's digest agreement names a rank
  // that merged otherwise), and rebuild the DiT in the request's precision. A resident DiT rebuilt for LoRAs is
  // timed as lora_merge; any other build (a DiT loaded for its phase) is a load.
  DitSwitch switch_dit(const ResolvedRequest& req);
  // The VAE decoders (and encoders), timed as loads.
  void load_vaes();
  // The text tower, collective over `tp` (null: this rank alone), timed as a load.
  std::unique_ptr<Qwen3VlTextModel> load_text(Comm* tp);
  // The vision tower (where the text tower runs, in its precision), timed as a load.
  std::unique_ptr<Qwen3VlVisionModel> load_vision(const Qwen3VlVisionConfig& vc);

  // The VAE encoders for keyframes / references: the loaded VAEs', else a pair loaded on the CPU for this request
  // (owned here, freed with it). The VAE encoders run on the CPU (the GPU VAEs upload their decoders only).
  struct VaeEncoders {
    std::unique_ptr<VideoVae> own_video;
    std::unique_ptr<AudioVae> own_audio;
    const VideoVae* video = nullptr;
    const AudioVae* audio = nullptr;
  };
  VaeEncoders vae_encoders();

  // The end of a phase: its model is freed unless it is resident; a resident one gives its streamed layers' ring back
  // (the plan counts the ring in its phase only).
  void after_encode();
  void after_denoise();
  void after_decode();
  // Whatever happens (a cancel, a failure), the models a request loaded for a phase are freed when it ends, so the
  // next request starts from the plan's resident set.
  void release_phase_models();

  // The loads since the last take_loads (the constructor's are reported with the first request).
  const std::vector<LoadTiming>& loads() const { return loads_; }
  std::vector<LoadTiming> take_loads();

 private:
  template <typename Fn>
  void timed_load(const char* model, int64_t file_bytes, Fn&& fn);
  HostMemory planned_host() const;
  DitStreaming dit_streaming() const;  // the placement's streaming of the DiT's blocks
  // Collective over the denoise ranks (DitModel checks that every rank merged the same LoRAs). `for_request`: the
  // request's LoRAs are merged (the constructor's pristine DiT merges none).
  void load_dit(const std::vector<GenerateRequest::LoraRef>& want, Precision precision, bool for_request = true);
  void free_dit();

  GenerateOptions opt_;
  ModelSources src_;
  Comm* comm_ = nullptr;
  RankRoles roles_;
  DistPlan plan_;
  ModelPlacement placement_;

  // `dit_` holds the LoRAs `loras_merged_` (its checkpoint `ckpt_`); a request with another set re-opens the
  // pristine, memory-mapped weights and merges again, so deltas never accumulate. `dit_` is null after a failed
  // switch, which forces the next request to rebuild.
  std::unique_ptr<DitCheckpoint> ckpt_;
  std::unique_ptr<DitModel> dit_;
  std::vector<GenerateRequest::LoraRef> loras_merged_, loras_last_;
  uint64_t lora_digest_ = 0;
  std::unique_ptr<VideoVae> vvae_;
  std::unique_ptr<AudioVae> avae_;
  std::unique_ptr<Qwen3VlTextModel> text_;

  std::vector<LoadTiming> loads_;
};

}  // namespace h3

// The phases of one request, in the order Generator::run calls them, each in its own file:
//   take_request   rank 0's request to every rank, checked against the models and (GPU) the memory plan  phases.cpp
//   encode_phase   prompt embeddings (text tower), packed layout, keyframe / reference rows          phase_encode.cpp
//   denoise_phase  seeded noise, the DiT for the request (LoRAs, precision), the Euler loop         phase_denoise.cpp
//   decode_phase   video VAE decode (streamed to the MP4 on one GPU rank), audio VAE decode          phase_decode.cpp
//   write_phase    the MP4 and the latents on rank 0 (atomic)                                        phase_write.cpp
// Each phase reads the request's state (RequestRun), the models (ModelResidency, which loads what the phase needs
// when it is not resident) and what the phase before handed it, and reports its time (loads excluded), its GPU peak
// and its progress share.
#pragma once
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "core/host_memory.h"
#include "distributed/comm.h"
#include "distributed/control.h"
#include "media/mp4_writer.h"
#include "model/dit/layout.h"
#include "pipeline/conditions.h"
#include "pipeline/generator.h"
#include "pipeline/rank_roles.h"
#include "pipeline/residency.h"
#include "pipeline/sampling.h"
#include "pipeline/streaming_mp4.h"

namespace h3 {

using phase_clock = std::chrono::steady_clock;
double seconds_since(phase_clock::time_point t0);

struct SuspendedGeneration;

// One request on its way through the phases: where it runs, how it reports, what it has produced.
struct RequestRun {
  RequestRun(Comm& c, const RankRoles& rank_roles, const ProgressFn& progress_fn, const std::atomic<bool>* cancel_flag,
             const PrecomputedInputs* inputs, const RunHooks* run_hooks)
      : comm(c),
        roles(rank_roles),
        root(c.rank() == 0),
        progress(progress_fn),
        cancel(cancel_flag),
        pre(inputs),
        hooks(run_hooks) {}
  Comm& comm;
  const RankRoles& roles;
  bool root = false;
  phase_clock::time_point t_start = phase_clock::now();
  const ProgressFn& progress;
  const std::atomic<bool>* cancel = nullptr;
  const PrecomputedInputs* pre = nullptr;
  const RunHooks* hooks = nullptr;                    // previews, suspend (null: none)
  std::shared_ptr<const SuspendedGeneration> resume;  // the state this run continues from (null: a fresh run)
  GenerateResult res;

  // Progress: fixed shares of the whole request per phase; ETA from the elapsed time and the share done.
  static constexpr double w_encode = 3, w_denoise = 85, w_video = 8, w_audio = 3, w_write = 1;
  void report(const std::string& phase, int step, int steps, double done_before, double share) const;
  ControlWord root_word() const;
  // One agreed control word outside the denoise loop (between phases).
  void check_cancel(const char* where) const;
  // Inside the prompt encoding: one word per text-tower layer on every rank of the group (the encoder ranks
  // before each layer, the others in step with them), so a cancel stops the encoding within one layer (a layer
  // of the released tower is ~1/36 of the encode). Synced: with encoder ranks, rank 0 has no layers of its own
  // to pace it.
  void check_cancel_layer(int64_t layer, int64_t layers) const;
};

// Peak device memory of one phase (rank 0 reports it): the allocator's high-water mark from a clean start.
// A phase's memory and wall-clock window: the GPU allocator's peak (GPU runs), this process's peak host RSS and the
// phase's start and end in unix seconds (for matching device-read memory samples of another process to it).
struct PhaseMeter {
  bool gpu;
  double start_unix_s = 0;
  std::unique_ptr<PeakHostMemory> host;
  explicit PhaseMeter(bool on_gpu);
  void done(const char* phase, GenerateResult& res) const;
};

// A phase's time, without the loads made inside it (loads from `loads_before` on: they are timed as loads).
void phase_done(RequestRun& run, const ModelResidency& models, const char* name, phase_clock::time_point t0,
                size_t loads_before);

// What the encode phase hands to the denoise phase.
struct Encoded {
  Tensor embeds;  // [L, text_dim] f32 on every rank
  std::shared_ptr<const PackedLayout> layout;
  ConditionRows cond;
};

// What the denoise phase hands to the decode phase (the final latents are in the run's result).
struct Denoised {
  SamplingSpec spec;
  SamplingRows rows;  // final, on every rank
};

// A run stopped at a denoising step boundary (Suspended, generator.h): what it had made, to continue from there. Every
// rank keeps its own (the rows only on the denoise ranks).
struct SuspendedGeneration : SuspendedRun {
  GenerateResult res;    // the request and what was recorded so far (encode timing, loads, windows, previews)
  Encoded enc;           // the prompt embeddings, layout and condition rows
  SamplingRows rows;     // after steps_done DiT calls (denoise ranks)
  double denoise_s = 0;  // the denoise phase's seconds before the stop (loads excluded)
  double elapsed_s = 0;  // the run's seconds before the stop (its ETA continues from them)
};

// What the decode phase hands to the write phase.
struct Decoded {
  Tensor pixels;                      // [3, frames, H, W] in [0, 1]; undefined when streamed to `mp4`
  Tensor wave;                        // [2, 1, samples]
  std::unique_ptr<StreamingMp4> mp4;  // the MP4 whose frames were streamed while decoding (null: write them now)
};

// Rank 0's request is the one that runs; it must fit these models, and on the GPU the memory plan before anything
// is loaded for it.
void take_request(RequestRun& run, const ModelResidency& models, const ResolvedRequest& req_in);
Encoded encode_phase(RequestRun& run, ModelResidency& models);
// From the noise, or from run.resume's step and rows; throws Suspended (with this rank's state) when asked to stop.
Denoised denoise_phase(RequestRun& run, ModelResidency& models, const Encoded& enc);
Decoded decode_phase(RequestRun& run, ModelResidency& models, const Denoised& den, const std::string& out_path);
void write_phase(RequestRun& run, const ModelResidency& models, const Decoded& media, const std::string& out_path);

// The MP4's stream parameters and metadata (the resolved request as JSON in `comment`).
MediaSpec media_spec(const ModelSources& src, const ResolvedRequest& req);

}  // namespace h3

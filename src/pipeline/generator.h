// Prompt to MP4: the public API of one text-to-video+audio (t2va) generation, shared by `h3 generate` and the
// server (`h3 serve`). Keep it stable: the server codes against it.
//
// Flow of one request (architecture.md "The flow of one request"):
//   GenerateRequest --resolve()--> ResolvedRequest (cheap checks only; throws h3::Error saying what is
//   allowed) Generator::run(): tokenizer -> text tower (encoder ranks) -> broadcast embeddings -> seeded CPU
//   noise -> DiT Euler loop over the two schedules (denoise ranks; cancel checked once per step, agreed by
//   every rank)
//   -> unpatchify -> video + audio VAE decode (all ranks) -> MP4 on rank 0 (atomic: nothing left on failure).
//
// Multi-rank contract: every rank of the communicator constructs the Generator with the same paths and
// options and calls run() together. Rank 0's ResolvedRequest is the one that runs (it is broadcast; the other
// ranks may pass the same request or any placeholder); progress callbacks fire on rank 0 only, the cancel
// flag is read on rank 0 only and its decision reaches every rank through the step control word, so all ranks
// stop together (each throws Cancelled) and the group stays usable for the next request.
#pragma once
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "distributed/comm.h"
#include "distributed/plan.h"
#include "model/dit/dit.h"
#include "pipeline/conditions.h"
#include "pipeline/memory_plan.h"
#include "pipeline/request.h"

namespace h3 {

// Thrown by Generator::run on every rank when the request was cancelled (a bad request throws plain
// h3::Error).
class Cancelled : public Error {
 public:
  explicit Cancelled(const std::string& what) : Error(what) {}
};

// A run stopped at a denoising step boundary (RunHooks::suspend) by Suspended, to be continued later by handing the
// state back (RunHooks::resume) to the same Generator or runner on the same rank: every rank keeps its own. The state
// is the run's own (pipeline/phases.h: the prompt embeddings, the rows after `steps_done` DiT calls, what was
// reported so far); a run resumed from it gives bitwise the result it would have given without the stop.
struct SuspendedRun {
  virtual ~SuspendedRun() = default;
  int steps_done = 0;  // DiT calls made
  int steps = 0;       // DiT calls of the whole run
};

// Thrown by Generator::run on every rank when a suspend was asked for (RunHooks::suspend): carries this rank's state.
class Suspended : public Error {
 public:
  Suspended(const std::string& what, std::shared_ptr<SuspendedRun> s) : Error(what), state(std::move(s)) {}
  std::shared_ptr<SuspendedRun> state;
};

// A preview of a run while it denoises (pipeline/preview.h): the x0 prediction after `step` of `steps` DiT calls,
// its first temporal chunk decoded by the video VAE, one frame of it scaled to a small picture.
struct PreviewPicture {
  int step = 0, steps = 0;
  int64_t frame = 0;  // the frame of the video it shows (its decode of the same latents gives that frame exactly)
  Tensor picture;     // [3, H, W] f32 in [0, 1], at most kPreviewMaxWidth wide (preview.h)
  Tensor x0_latents;  // [C, T', h, w] f32: the prediction's first latent frames, which the picture was decoded from
};
using PreviewFn = std::function<void(const PreviewPicture&)>;

// What a run does besides generating; each part optional. Nothing here changes the result: a run with previews, or
// suspended and resumed, gives bitwise the latents of a plain run.
struct RunHooks {
  // Previews: after every `preview_every` DiT calls (0 = none; never after the last call, whose prediction is the
  // final video), made by rank 0 between two calls, synchronously (the other ranks wait at the next step's control
  // word; nothing is exchanged for it). Needs the video VAE loaded while denoising (always on the CPU; on the GPU
  // when the memory plan keeps the VAEs resident): without it the run makes none and logs why once.
  int preview_every = 0;
  PreviewFn preview;  // rank 0
  // Rank 0: true stops the run at the next denoising step boundary (Suspended, with this rank's state); outside the
  // denoising the flag waits for its first step boundary (a run past it completes).
  const std::atomic<bool>* suspend = nullptr;
  // The state a Suspended carried: the run continues from it (every rank passes its own; the request must be the
  // same). Null: a fresh run.
  std::shared_ptr<SuspendedRun> resume;
};

// Where the weights are. Each component: a file or folder in any accepted layout, or "procedural:mini"
// (generated in code, no download). `model_dir` is a released/diffusers folder whose subfolders supply any
// component not given explicitly (transformer/, vae/ or video_vae/, audio_vae/, text_encoder/, tokenizer/).
// Everything empty = procedural mini models for every component (pictures are meaningless noise then).
struct ModelPaths {
  std::string model_dir;
  std::string dit, video_vae, audio_vae, text_encoder, tokenizer;
};

struct GenerateOptions {
  // Where the models run. Device::cuda (the GPU backend must be running): the DiT in bf16 or fp8, the VAE decoders
  // and (text_device) the Qwen3-VL text and vision towers on the GPU, loaded by the memory plan
  // (pipeline/memory_plan.h); the VAE encoders (fl2va / ref2va conditions) stay on the CPU. Device::cpu: everything
  // on the CPU.
  Device device = Device::cpu;
  Precision precision = Precision::f32;       // DiT: f64, f32, bf16 (CPU: emulated), fp8 (GPU only)
  Precision vae_precision = Precision::f32;   // video VAE decoder: f64 / f32 on the CPU, f32 / bf16 on the GPU
  Precision text_precision = Precision::f32;  // text and vision towers: f64 / f32 on the CPU, bf16 / f32 on the GPU
  Device text_device = Device::cpu;           // where the text tower runs (cuda needs `device` cuda)
  // GPU: which models stay loaded between requests (memory_plan.h). h3 generate runs one request and takes phases
  // (the smallest peak); h3 serve takes auto (the most residency that fits its largest request).
  MemoryPolicy memory = MemoryPolicy::phases;
  // GPU: whether the DiT's blocks and the text tower's layers may stream from host memory when they do not all fit
  // (memory_plan.h); false: every model loads whole (or the request is refused).
  bool stream_layers = true;
  // GPU: the device memory this process may use, its CUDA context included (GpuOptions::max_device_bytes, given as
  // --max-device-memory; 0: what is free at start less memory_plan.h's margin). Every request is planned inside it.
  int64_t max_device_bytes = 0;
  // GPU: the host memory each rank may use (--host-memory; 0: its share of what the host has available when the
  // models are planned). The DiT's blocks and the text tower's layers that do not fit the GPU wait in page-locked
  // copies when those fit in it with io/layer_stream.h's margin, else stream from the memory-mapped checkpoint.
  int64_t host_bytes = 0;
  DistOptions dist;  // how the DiT is spread over the denoise ranks
  // 0: the text tower runs tensor-parallel on every rank and is freed before denoising; K > 0: it stays loaded
  // on the last K ranks (tensor-parallel among them), which only encode and broadcast the embeddings, and the
  // other ranks denoise (needs world > K). The embeddings are bitwise the same for every placement.
  int encoder_ranks = 0;
  Comm* comm = nullptr;        // the group to run on; null = world()
  bool keep_media = false;     // keep pixels and waveform in GenerateResult (tests, verify)
  bool write_latents = false;  // also write "<out>.latents.safetensors" next to the MP4 (rank 0)
};

// The defaults above for a device: cpu f32 everywhere (f64 VAEs and text with an f64 DiT); cuda the DiT in bf16
// (the released recipe), the VAE decoders in bf16, the text and vision towers on the GPU in bf16, policy phases.
GenerateOptions default_generate_options(Device device, const std::string& precision = "");
// The choices the CLI (h3 generate) and the server (h3 serve) take by name; "" keeps the device's default.
struct GenerateChoices {
  std::string precision, vae_precision, text_precision;  // precision_from_name
  std::string text_device;                               // "cpu" or "cuda"
  std::string memory;                                    // memory_policy_from_name
  std::string host_memory;                               // --host-memory: a byte size ("64G")
};
// default_generate_options with those choices applied. A text tower moved to the CPU without a precision runs in
// the CPU's f32 (bf16 is the GPU's default).
GenerateOptions generate_options_from(Device device, const GenerateChoices& c);
// Throws naming the flag when a combination cannot run (fp8 or bf16 VAEs on the CPU, f64 VAEs on the GPU, ...).
void check_generate_options(const GenerateOptions& o);

struct GenerateProgress {
  std::string phase;   // "encode", "denoise", "decode_video", "decode_audio", "write", "done"
  int step = 0;        // within the phase (denoise: DiT calls done)
  int steps = 0;       // total of the phase (denoise: model_calls)
  double percent = 0;  // of the whole request, 0..100
  double eta_s = -1;   // seconds left for the whole request (-1 = unknown yet)
};
using ProgressFn = std::function<void(const GenerateProgress&)>;

struct PhaseTiming {
  std::string phase;
  double seconds = 0;
};

// One model loaded during a request (or by the constructor, reported with the first request): how long it took and
// the bytes it read (a checkpoint file's stored bytes; 0 for procedural weights, which are generated).
struct LoadTiming {
  std::string model;  // "dit", "text", "video_vae", "audio_vae", "vision"
  double seconds = 0;
  int64_t file_bytes = 0;
  int64_t device_bytes = 0;  // what it holds on the GPU (0 on the CPU)
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(file_bytes) / 1e9 / seconds : 0; }
};

// The GPU's peak allocated bytes during one phase of a request (rank 0), its model's load included.
struct PhasePeak {
  std::string phase;  // "encode", "denoise", "decode_video", "decode_audio"
  int64_t bytes = 0;
};

// One phase of a request on rank 0: when it ran (unix seconds, for matching another process's samples of the
// device's memory to it) and this process's peak resident host memory in it.
struct PhaseWindow {
  std::string phase;
  double start_unix_s = 0, end_unix_s = 0;
  int64_t host_rss_peak_bytes = 0;
};

// Precomputed inputs replacing the text tower and/or the noise generator (tests, golden checks). Only rank
// 0's are used (broadcast to the others).
struct PrecomputedInputs {
  Tensor prompt_embeds;     // [L, text_dim] f32; undefined = run tokenizer + text tower
  Tensor video_noise;       // [C, T, h, w] f32; undefined = seeded CPU generator
  Tensor audio_noise_rows;  // [2A, audio_channels] f32; undefined = seeded CPU generator
};

struct GenerateResult {
  ResolvedRequest request;
  Tensor video_latents;      // [C, T, h, w] f32, final (bitwise equal for every rank count in ulysses modes)
  Tensor audio_latent_rows;  // [2A, audio_channels] f32, final packed rows (row = ch * A + a)
  Tensor pixels01;           // [3, frames, H, W] when options.keep_media
  Tensor waveform;           // [2, 1, samples] when options.keep_media
  int64_t prompt_tokens = 0;
  int64_t vision_rows = 0, vision_blocks = 0;  // rows fed by the Qwen3-VL vision tower, and its blocks
  uint64_t lora_digest = 0;    // of the LoRAs merged for this request (0 = none; agreed by every denoise rank)
  bool lora_remerged = false;  // the DiT was re-merged from the pristine weights for this request
  Precision precision = Precision::f32;  // the DiT's for this request (the request's, else the generator's)
  // load (the constructor's, first run only, plus this request's per-phase loads), lora_merge (when re-merged),
  // encode, denoise, decode_video, decode_audio, mux. Time to MP4 = the sum without load and lora_merge.
  std::vector<PhaseTiming> timings;
  std::vector<LoadTiming> loads;      // the loads counted in timings' "load"
  std::vector<PhasePeak> peaks;       // GPU runs only
  std::vector<PhaseWindow> windows;   // encode, denoise, decode_video, decode_audio
  MemoryPlan memory_plan;             // GPU runs: the plan this request ran under
  double time_to_mp4() const;         // seconds, loads excluded
  std::vector<std::string> warnings;  // e.g. vision rows absent from the prompt (pipeline/conditions.h)
  int previews = 0;                   // previews made (RunHooks::preview_every; rank 0)
  double preview_seconds = 0;         // their time, inside the denoise phase's
  std::string out_path;               // what was written on rank 0 ("" elsewhere)
  bool wrote_mp4 = false;             // false: latents only (no MP4 writer in this build)
  // Each DiT call's wall time on rank 0 (a resumed run's include those before it was suspended), from the end of the
  // one before (or the loop's start) to its Euler step's end: the first holds cuBLASLt's tuning, a step with a preview
  // its preview.
  std::vector<double> call_seconds;
  std::vector<double> forward_seconds;  // of each call, its DiT forward alone (SamplingHooks::forward_seconds)
  double median_call_seconds() const;   // of call_seconds after the first (the first alone if that is all); 0: none
};

class Generator {
 public:
  // Loads every model once (collective over options.comm). Throws h3::Error naming missing files or
  // mismatched components (text tower width vs DiT text_dim, VAE latent channels vs DiT channels).
  Generator(const ModelPaths& paths, const GenerateOptions& options);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  // The rules this generator's models accept; use with resolve().
  const ModelLimits& limits() const;
  // The same without loading anything (reads at most the video VAE's config), to refuse bad requests before
  // the models are loaded.
  static ModelLimits limits_for(const ModelPaths& paths);
  // The device-memory plan of `req` on this rank's GPU without loading anything (model configs and headers only);
  // check .fits (and .problem) before constructing a Generator. Every rank must call it (the device memory is
  // agreed). Device::cpu: an empty plan that fits.
  static MemoryPlan memory_plan_for(const ModelPaths& paths, const GenerateOptions& options,
                                    const ResolvedRequest& req);
  // The plan the generator runs `req` under (the same as memory_plan_for with its residency).
  MemoryPlan memory_plan(const ResolvedRequest& req) const;
  // One line per component: what was loaded and from where (procedural ones say so).
  std::vector<std::string> describe() const;
  bool procedural() const;      // some component is procedural (the output is meaningless pictures)
  int sample_rate() const;      // audio samples per second of the decoded waveform
  double load_seconds() const;  // time the constructor spent loading

  // Runs one request (collective). Writes `out_path` (MP4, atomically, on rank 0) unless it is empty. Throws
  // Cancelled when *cancel becomes true (checked once per denoising step and between decode phases), Suspended when
  // hooks->suspend asks for it (every rank, at the same step).
  GenerateResult run(const ResolvedRequest& req, const std::string& out_path, const ProgressFn& progress = {},
                     const std::atomic<bool>* cancel = nullptr, const PrecomputedInputs* precomputed = nullptr,
                     const RunHooks* hooks = nullptr);

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

// The message printed when the models are procedural: what that means and how to point at real weights.
std::string procedural_models_notice();

}  // namespace h3

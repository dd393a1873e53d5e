// What the rank group runs for one job, behind one small interface: the real Generator (pipeline/generator.h)
// or a fake runner with the same collective shape (per-step control word, cancellation, progress, a rank
// fault hook) and no models, for the server's own tests. Also the request resolution the supervisor does
// before queueing.
#pragma once
#include <atomic>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "distributed/comm.h"
#include "pipeline/generator.h"

namespace h3::serve {

struct RunnerOptions {
  std::string kind = "generator";  // "generator" or "fake"
  ModelPaths paths;
  std::string device = "cpu";                  // the rank group's --device (cuda: the models on the GPU)
  bool deterministic = false;                  // the rank group's --deterministic
  Transport transport = Transport::automatic;  // the rank group's --transport (distributed/plan.h)
  std::string precision;                       // DiT; "" = the device's default (generator.h: default_generate_options)
  std::string vae_precision, text_precision, text_device;  // "" = the device's defaults
  std::string memory = "auto";                             // GPU memory plan: auto, resident or phases
  std::string host_memory;  // --host-memory: host memory each rank may use ("" = its share of what is available)
  std::string mode = "ulysses";
  int tp = 1, chunks = 1, encoder_ranks = 0;
  bool write_latents = false;  // generator: "<out>.latents.safetensors" beside each MP4
  int fake_step_ms = 100;      // fake: wall time of one denoising step
  int fake_load_ms = 500;      // fake: time "loading models" takes
};

class JobRunner {
 public:
  virtual ~JobRunner() = default;
  virtual ModelLimits limits() const = 0;
  virtual nlohmann::json describe() const = 0;  // what was loaded, for /v1/models
  // Why the videos mean nothing (procedural models, the fake runner), or "" for real weights: the web page's
  // banner.
  virtual std::string notice() const = 0;
  // Runs one resolved request collectively. Rank 0 writes `out_path`. Throws Cancelled, Suspended (hooks.suspend; a
  // state this runner takes back as hooks.resume) or h3::Error. Previews as RunHooks says (pipeline/generator.h).
  virtual nlohmann::json run(const ResolvedRequest& req, const std::string& out_path, const ProgressFn& progress,
                             const std::atomic<bool>* cancel, const RunHooks& hooks) = 0;
};

// Collective: every rank of `comm` constructs its runner (models load here).
std::unique_ptr<JobRunner> make_runner(const RunnerOptions& options, Comm& comm);
std::unique_ptr<JobRunner> make_fake_runner(const RunnerOptions& options, Comm& comm);

nlohmann::json limits_to_json(const ModelLimits& l);
ModelLimits limits_from_json(const nlohmann::json& j);

// The test hook: "RANK:STEP:kill" or "RANK:STEP:stall" (the job-level form of H3_DEBUG_FAULT). Throws
// h3::Error when malformed.
struct FaultSpec {
  int rank = -1, step = -1;
  bool kill = false;
  static FaultSpec parse(const std::string& s);
  bool active() const { return rank >= 0; }
  void at_step(int rank_now, int step_now) const;  // kills or stalls this process when it matches
};

}  // namespace h3::serve

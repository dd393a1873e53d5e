// The request's state through the phases (phases.h) and the first step, taking the request.
#include "pipeline/phases.h"

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "core/profile.h"
#include "pipeline/bcast.h"

namespace h3 {

using json = nlohmann::json;

double seconds_since(phase_clock::time_point t0) {
  return std::chrono::duration<double>(phase_clock::now() - t0).count();
}

void RequestRun::report(const std::string& phase, int step, int steps, double done_before, double share) const {
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

ControlWord RequestRun::root_word() const {
  return root && cancel && cancel->load() ? ControlWord::cancel : ControlWord::proceed;
}

void RequestRun::check_cancel(const char* where) const {
  if (step_control(comm, root_word()) == ControlWord::cancel)
    throw Cancelled(fmt::format("request cancelled {}", where));
}

void RequestRun::check_cancel_layer(int64_t layer, int64_t layers) const {
  if (synced_control(comm, root_word()) == ControlWord::cancel)
    throw Cancelled(
        fmt::format("request cancelled while encoding the prompt (before text layer {} of {})", layer + 1, layers));
}

namespace {
double unix_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}
}  // namespace

PhaseMeter::PhaseMeter(bool on_gpu) : gpu(on_gpu) {
  if (gpu) {
    gpu_release_cached();
    gpu_reset_peak();
  }
  host = std::make_unique<PeakHostMemory>();
  start_unix_s = unix_seconds();
}

void PhaseMeter::done(const char* phase, GenerateResult& res) const {
  if (gpu) {
    gpu_synchronize();
    res.peaks.push_back({phase, static_cast<int64_t>(gpu_peak_bytes())});
  }
  res.windows.push_back({phase, start_unix_s, unix_seconds(), host->peak_bytes()});
}

void phase_done(RequestRun& run, const ModelResidency& models, const char* name, phase_clock::time_point t0,
                size_t loads_before) {
  if (models.gpu()) gpu_synchronize();
  double s = seconds_since(t0);
  const std::vector<LoadTiming>& loads = models.loads();
  for (size_t i = loads_before; i < loads.size(); ++i) s -= loads[i].seconds;
  run.res.timings.push_back({name, s});
  // --profile-regions: where the phase's time went, by region (core/profile.h), on every rank.
  if (profile::enabled()) {
    const std::vector<profile::Total> totals = profile::take();
    if (!totals.empty()) spdlog::info("profile {}: {}", name, profile::line(totals));
  }
}

void take_request(RequestRun& run, const ModelResidency& models, const ResolvedRequest& req_in) {
  Comm& comm = run.comm;
  run.res.request = comm.size() > 1
                        ? ResolvedRequest::from_json(parse_json_bounded(
                              bcast_string(comm, run.root ? req_in.to_json().dump() : "", 0, "generate request"),
                              "the broadcast request", kJsonMaxDepth, false))
                        : req_in;
  const ResolvedRequest& req = run.res.request;
  const ModelLimits& limits = models.sources().limits;
  H3_CHECK(req.height % limits.canvas_multiple == 0 && req.width % limits.canvas_multiple == 0 &&
               req.latent_h * limits.vae_spatial_ratio == req.height &&
               req.latent_w * limits.vae_spatial_ratio == req.width,
           "request {}x{} does not fit these models (multiples of {}, VAE stride {}): resolve it with the "
           "generator's limits()",
           req.width, req.height, limits.canvas_multiple, limits.vae_spatial_ratio);
  if (models.gpu()) {
    run.res.memory_plan = models.plan_for(req);
    H3_CHECK(run.res.memory_plan.fits, "this request does not fit the GPU beside the resident models: {}",
             run.res.memory_plan.problem);
  }
}

}  // namespace h3

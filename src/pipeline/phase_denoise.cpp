// The denoise phase (phases.h): seeded noise (CPU generator, seeded per request: the same on every rank and for every
// rank count), the DiT (loaded for it when it is not resident, freed after it), then the Euler loop on the denoise
// ranks; every rank ends with the final rows and latents.
#include <cmath>

#include "pipeline/bcast.h"
#include "pipeline/noise.h"
#include "pipeline/phases.h"

namespace h3 {

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

// The sampling loop's parameters: the request's geometry and schedules, the encode phase's layout and rows.
SamplingSpec sampling_spec(const ResolvedRequest& req, const Encoded& enc) {
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
  return spec;
}

// Seeded noise of `shape`, or rank 0's precomputed tensor (broadcast, so only rank 0 needs it).
Tensor noise(RequestRun& run, const Tensor* given, const Shape& shape, uint64_t stream, const char* what) {
  Comm& comm = run.comm;
  int32_t use = run.root && given && given->defined() && given->numel() > 0 ? 1 : 0;
  if (comm.size() > 1) comm.broadcast(&use, sizeof(use), 0, std::string(what) + " source");
  if (!use) return seeded_normal(shape, run.res.request.seed, stream);
  Tensor t = run.root ? given->to(DType::f32) : Tensor();
  if (comm.size() > 1) bcast_tensor(comm, t, 0, what);
  return t;
}

// The request's DiT (ModelResidency::switch_dit), recorded in the result.
void switch_dit(RequestRun& run, ModelResidency& models) {
  const ModelResidency::DitSwitch s = models.switch_dit(run.res.request);
  run.res.precision = s.precision;
  run.res.lora_remerged = s.remerged;
  if (s.lora_merge_s) run.res.timings.push_back({"lora_merge", *s.lora_merge_s});
  run.res.lora_digest = s.lora_digest;
}

// NaN/Inf in the final latents (non-finite weights in the checkpoint or a LoRA, bad precomputed inputs, a diverged
// run) fail the request with the reason instead of writing a video of garbage. Rank 0 counts and every rank gets the
// verdict, so all fail alike.
void check_finite(RequestRun& run) {
  int64_t non_finite =
      run.root ? count_non_finite(run.res.video_latents) + count_non_finite(run.res.audio_latent_rows) : 0;
  if (run.comm.size() > 1) run.comm.broadcast(&non_finite, sizeof(non_finite), 0, "non-finite latents");
  H3_CHECK(non_finite == 0,
           "the final latents hold {} non-finite values (NaN or Inf): the checkpoint, a LoRA or the precomputed "
           "inputs hold non-finite numbers, or the run diverged; nothing was written (check the weights with "
           "`h3 info`)",
           non_finite);
}

}  // namespace

Denoised denoise_phase(RequestRun& run, ModelResidency& models, const Encoded& enc) {
  Comm& comm = run.comm;
  const PrecomputedInputs* pre = run.pre;
  const ResolvedRequest& req = run.res.request;
  const PhaseMeter meter(models.gpu());
  Denoised den;
  den.spec = sampling_spec(req, enc);
  const DitConfig& dc = models.sources().dit_config;
  const Shape vshape{dc.in_channels, req.latent_frames, req.latent_h, req.latent_w};
  const Shape ashape{2 * req.audio_latents, dc.audio_in_channels};
  const Tensor vnoise = noise(run, pre ? &pre->video_noise : nullptr, vshape, 0, "video noise");
  const Tensor anoise = noise(run, pre ? &pre->audio_noise_rows : nullptr, ashape, 1, "audio noise rows");
  switch_dit(run, models);

  const auto t0 = phase_clock::now();
  bool cancelled = false;
  const int calls = req.model_calls;
  if (run.roles.denoiser) {
    auto on_step = [&](int step, int total, const SamplingRows&) {
      run.report("denoise", step + 1, total, RequestRun::w_encode, RequestRun::w_denoise);
    };
    auto want_cancel = [&]() { return run.cancel && run.cancel->load(); };
    run.report("denoise", 0, calls, RequestRun::w_encode, RequestRun::w_denoise);
    den.rows =
        denoise_loop(*models.dit(), den.spec, enc.embeds, vnoise, anoise, comm, want_cancel, on_step, &cancelled);
  } else {
    cancelled = follow_denoise_loop(den.spec, comm);
  }
  if (cancelled) throw Cancelled(fmt::format("request cancelled during denoising"));
  if (run.roles.final_rows_broadcast()) {  // the encoder ranks take the rows from rank 0
    bcast_tensor(comm, den.rows.video, 0, "final video rows");
    bcast_tensor(comm, den.rows.audio, 0, "final audio rows");
  }
  run.res.video_latents = rows_to_video_latents(den.rows, den.spec, dc.in_channels);
  run.res.audio_latent_rows = den.rows.audio.to(DType::f32);
  phase_done(run, models, "denoise", t0, models.loads().size());
  meter.done("denoise", run.res);
  models.after_denoise();
  check_finite(run);
  return den;
}

}  // namespace h3

// The denoise phase (phases.h): seeded noise (CPU generator, seeded per request: the same on every rank and for every
// rank count), the DiT (loaded for it when it is not resident, freed after it), then the Euler loop on the denoise
// ranks; every rank ends with the final rows and latents.
#include <cmath>

#include "core/log.h"
#include "model/vae/tiling.h"
#include "pipeline/bcast.h"
#include "pipeline/noise.h"
#include "pipeline/phases.h"
#include "pipeline/preview.h"

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

// Previews (RunHooks::preview_every): rank 0 decodes the prediction's first chunk with the loaded video VAE between two
// DiT calls; nothing else waits on it but the next step's control word. Without a loaded VAE (a GPU plan that loads it
// for the decode only) there are none, said once per request.
struct Previews {
  RequestRun& run;
  const VideoVae* vae = nullptr;
  int every = 0;
  PreviewSpan span;
  int64_t channels = 0;

  Previews(RequestRun& r, const ModelResidency& models) : run(r) {
    const RunHooks* h = run.hooks;
    if (!run.root || !h || h->preview_every <= 0 || !h->preview) return;
    vae = models.video_vae();
    if (!vae) {
      spdlog::warn(
          "previews: none for this request (the video VAE is not loaded while denoising: on the GPU, --memory-plan "
          "auto or resident keeps it when it fits)");
      return;
    }
    every = h->preview_every;
    span = preview_span(vae->config(), run.res.request.latent_frames);
    channels = models.sources().dit_config.in_channels;
  }
  bool wanted(int step, int calls) const { return every > 0 && (step + 1) % every == 0 && step + 1 < calls; }
  void make(int step, int calls, const Tensor& x0_rows) {
    const auto t0 = phase_clock::now();
    const ResolvedRequest& req = run.res.request;
    PreviewPicture p;
    p.step = step + 1;
    p.steps = calls;
    p.frame = span.frame;
    const Tensor x0 = unpatchify_video(x0_rows, channels, req.latent_frames, req.latent_h, req.latent_w).to(DType::f32);
    p.x0_latents = vae::slice_dim(x0, 1, 0, span.latent_frames);
    p.picture = preview_picture(*vae, p.x0_latents, span);
    run.hooks->preview(p);
    ++run.res.previews;
    run.res.preview_seconds += seconds_since(t0);
  }
};

}  // namespace

Denoised denoise_phase(RequestRun& run, ModelResidency& models, const Encoded& enc) {
  Comm& comm = run.comm;
  const PrecomputedInputs* pre = run.pre;
  const ResolvedRequest& req = run.res.request;
  const SuspendedGeneration* resume = run.resume.get();
  const PhaseMeter meter(models.gpu());
  Denoised den;
  den.spec = sampling_spec(req, enc);
  const DitConfig& dc = models.sources().dit_config;
  const Shape vshape{dc.in_channels, req.latent_frames, req.latent_h, req.latent_w};
  const Shape ashape{2 * req.audio_latents, dc.audio_in_channels};
  // A resumed run starts from its rows (every rank resumes, so every rank skips the noise's broadcasts alike).
  const Tensor vnoise = resume ? Tensor() : noise(run, pre ? &pre->video_noise : nullptr, vshape, 0, "video noise");
  const Tensor anoise =
      resume ? Tensor() : noise(run, pre ? &pre->audio_noise_rows : nullptr, ashape, 1, "audio noise rows");
  switch_dit(run, models);

  const auto t0 = phase_clock::now();
  const size_t loads_before = models.loads().size();
  LoopEnd end = LoopEnd::done;
  int done = 0;
  const int calls = req.model_calls;
  const int start = resume ? resume->steps_done : 0;
  if (run.roles.denoiser) {
    Previews previews(run, models);
    SamplingHooks hooks;
    auto call_start = phase_clock::now();
    hooks.on_step = [&](int step, int total, const SamplingRows&) {
      run.res.call_seconds.push_back(seconds_since(call_start));
      call_start = phase_clock::now();
      run.report("denoise", step + 1, total, RequestRun::w_encode, RequestRun::w_denoise);
    };
    hooks.cancel = [&]() { return run.cancel && run.cancel->load(); };
    hooks.suspend = [&]() { return run.hooks && run.hooks->suspend && run.hooks->suspend->load(); };
    hooks.predict_at = [&](int step, int total) { return previews.wanted(step, total); };
    hooks.on_prediction = [&](int step, int total, const Tensor& x0) { previews.make(step, total, x0); };
    hooks.forward_seconds = &run.res.forward_seconds;
    hooks.start_step = start;
    if (resume) hooks.start_rows = resume->rows;
    run.report("denoise", start, calls, RequestRun::w_encode, RequestRun::w_denoise);
    den.rows = denoise_loop(*models.dit(), den.spec, enc.embeds, vnoise, anoise, comm, hooks, &end, &done);
  } else {
    end = follow_denoise_loop(den.spec, comm, start, &done);
  }
  if (end == LoopEnd::cancelled) throw Cancelled(fmt::format("request cancelled during denoising"));
  if (end == LoopEnd::suspended) {
    auto state = std::make_shared<SuspendedGeneration>();
    state->steps_done = done;
    state->steps = calls;
    state->res = run.res;
    state->enc = enc;
    state->rows = den.rows;
    double s = seconds_since(t0);
    for (size_t i = loads_before; i < models.loads().size(); ++i) s -= models.loads()[i].seconds;
    state->denoise_s = (resume ? resume->denoise_s : 0) + s;
    state->elapsed_s = seconds_since(run.t_start);
    // The loads made so far are the state's (reported when the run completes).
    for (auto& l : models.take_loads()) state->res.loads.push_back(std::move(l));
    throw Suspended(fmt::format("suspended after {} of {} denoising steps", done, calls), std::move(state));
  }
  if (run.roles.final_rows_broadcast()) {  // the encoder ranks take the rows from rank 0
    bcast_tensor(comm, den.rows.video, 0, "final video rows");
    bcast_tensor(comm, den.rows.audio, 0, "final audio rows");
  }
  run.res.video_latents = rows_to_video_latents(den.rows, den.spec, dc.in_channels);
  run.res.audio_latent_rows = den.rows.audio.to(DType::f32);
  phase_done(run, models, "denoise", t0, loads_before);
  if (resume) run.res.timings.back().seconds += resume->denoise_s;
  meter.done("denoise", run.res);
  models.after_denoise();
  check_finite(run);
  return den;
}

}  // namespace h3

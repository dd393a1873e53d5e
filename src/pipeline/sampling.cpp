#include "pipeline/sampling.h"

#include <chrono>
#include <cstring>

#include "distributed/control.h"
#include "model/vae/shard.h"

namespace h3 {

PackedLayout t2va_layout(const SamplingSpec& spec) {
  H3_CHECK(spec.num_text >= 1, "t2va: the prompt has no tokens (an empty prompt embedding)");
  const TargetGrid grid{spec.latent_frames, spec.latent_h, spec.latent_w, spec.audio_latents};
  return build_fl2va_layout(text_tags_with_vision(spec.num_text, {}), grid, {});
}

void sampling_schedules(const SamplingSpec& spec, FlowSchedule& video, FlowSchedule& audio) {
  video = make_flow_schedule(spec.steps, spec.shift);
  audio = make_flow_schedule(spec.steps, spec.audio_shift);
  // Both schedulers advance with the same step index; a grid whose f32 values collide under one shift but not
  // the other would leave them with different lengths.
  H3_CHECK(video.num_steps() == audio.num_steps(),
           "{} steps with shifts {} / {}: the video schedule has {} distinct steps but the audio one {} (f32 grid "
           "points collide); use fewer steps or other shifts",
           spec.steps, spec.shift, spec.audio_shift, video.num_steps(), audio.num_steps());
}

int sampling_model_calls(const SamplingSpec& spec) {
  FlowSchedule v, a;
  sampling_schedules(spec, v, a);
  return static_cast<int>(v.num_steps());
}

namespace {

Tensor f32_copy(const Tensor& t) {
  return t.to(DType::f32);
}
std::span<const float> cspan(const Tensor& t) {
  return {t.data<float>(), static_cast<size_t>(t.numel())};
}

// The velocity's rows after the n_cond condition rows, as host f32: a view of the DiT's output when it is that
// already (f32 and bf16 runs), else a rounded copy (f64 runs, like the reference's f32 latents).
Tensor target_velocity(const Tensor& v, int64_t n_cond) {
  const Tensor target = v.rows(n_cond, v.dim(0));
  return target.dtype() == DType::f32 && !target.on_device() ? target : f32_copy(target.cpu());
}

// [a; b] along rows (both f32, same width).
Tensor concat_rows(const Tensor& a, const Tensor& b) {
  H3_ASSERT(a.ndim() == 2 && b.ndim() == 2 && a.dim(1) == b.dim(1), "concat_rows {} {}", a.describe(), b.describe());
  Tensor out(DType::f32, {a.dim(0) + b.dim(0), a.dim(1)});
  std::memcpy(out.raw(), a.raw(), a.nbytes());
  std::memcpy(static_cast<std::byte*>(out.raw()) + a.nbytes(), b.raw(), b.nbytes());
  return out;
}

// x0 = x + (1 - t) v, one f32 rounding per operation in euler_step's order (schedule.cpp), into a fresh tensor.
Tensor x0_prediction(const Tensor& x, const Tensor& v, float t) {
  H3_ASSERT(x.numel() == v.numel(), "x0 prediction: {} vs {}", x.describe(), v.describe());
  Tensor x0(DType::f32, x.shape());
  const float sigma_t = 1.0f - t;
  const float* px = x.data<float>();
  const float* pv = v.data<float>();
  float* o = x0.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float scaled_v = sigma_t * pv[i];
    o[i] = px[i] + scaled_v;
  }
  return x0;
}

void check_shape(const Tensor& t, const Shape& want, const char* what) {
  H3_CHECK(t.shape() == want, "sampling: {} is {}, expected {}", what, shape_str(t.shape()), shape_str(want));
}

}  // namespace

SamplingRows denoise_loop(const DitModel& dit, const SamplingSpec& spec, const Tensor& prompt_embeds,
                          const Tensor& video_noise, const Tensor& audio_noise_rows, Comm& control,
                          const SamplingCancelFn& cancel, const SamplingStepFn& on_step, bool* cancelled) {
  SamplingHooks hooks;
  hooks.cancel = cancel;
  hooks.on_step = on_step;
  LoopEnd end = LoopEnd::done;
  int done = 0;
  SamplingRows x = denoise_loop(dit, spec, prompt_embeds, video_noise, audio_noise_rows, control, hooks, &end, &done);
  if (cancelled) *cancelled = end == LoopEnd::cancelled;
  return x;
}

SamplingRows denoise_loop(const DitModel& dit, const SamplingSpec& spec, const Tensor& prompt_embeds,
                          const Tensor& video_noise, const Tensor& audio_noise_rows, Comm& control,
                          const SamplingHooks& hooks, LoopEnd* end, int* steps_done) {
  const DitConfig& c = dit.config();
  if (end) *end = LoopEnd::done;
  const PackedLayout layout = spec.layout ? *spec.layout : t2va_layout(spec);
  H3_CHECK(layout.num_text == spec.num_text && layout.target.latent_frames == spec.latent_frames &&
               layout.target.latent_h == spec.latent_h && layout.target.latent_w == spec.latent_w &&
               layout.target.audio_latents == spec.audio_latents,
           "sampling: the packed layout (L {}, T {}, {}x{}, A {}) does not match the spec (L {}, T {}, {}x{}, A {})",
           layout.num_text, layout.target.latent_frames, layout.target.latent_h, layout.target.latent_w,
           layout.target.audio_latents, spec.num_text, spec.latent_frames, spec.latent_h, spec.latent_w,
           spec.audio_latents);
  const int64_t ncv = layout.num_condition_video_rows, nca = layout.num_condition_audio_rows;
  FlowSchedule vs, as;
  sampling_schedules(spec, vs, as);
  const int calls = static_cast<int>(vs.num_steps());
  H3_CHECK(hooks.start_step >= 0 && hooks.start_step <= calls, "sampling: resuming at step {} of {}", hooks.start_step,
           calls);

  check_shape(prompt_embeds, {spec.num_text, c.text_dim}, "prompt embeddings");
  const int64_t nv = static_cast<int64_t>(layout.video_indices.size());
  const int64_t na = static_cast<int64_t>(layout.audio_indices.size());
  if (ncv > 0) check_shape(spec.cond_video_rows, {ncv, c.in_channels * kPatch * kPatch}, "condition video rows");
  if (nca > 0) check_shape(spec.cond_audio_rows, {nca, c.audio_in_channels}, "reference audio rows");
  SamplingRows x;
  if (hooks.start_rows.video.defined()) {  // resuming: the rows after start_step calls, as they were
    x.video = hooks.start_rows.video.clone();
    x.audio = hooks.start_rows.audio.clone();
  } else {
    Tensor vnoise = video_noise;
    if (vnoise.ndim() == 5 && vnoise.dim(0) == 1)
      vnoise = vnoise.reshape({vnoise.dim(1), vnoise.dim(2), vnoise.dim(3), vnoise.dim(4)});
    check_shape(vnoise, {c.in_channels, spec.latent_frames, spec.latent_h, spec.latent_w}, "video noise");
    check_shape(audio_noise_rows, {2 * spec.audio_latents, c.audio_in_channels}, "audio noise rows");
    x.video = f32_copy(patchify_video(f32_copy(vnoise)));
    x.audio = f32_copy(audio_noise_rows);
  }
  H3_ASSERT(x.video.dim(0) == nv - ncv && x.audio.dim(0) == na - nca, "sampling rows {} / {} vs layout {} / {}",
            x.video.dim(0), x.audio.dim(0), nv - ncv, na - nca);

  // Everything but the rows and the timesteps is the same at every step.
  DitInputs in;
  in.text = f32_copy(prompt_embeds);
  in.token_tags = Tensor::from(layout.token_tags, {layout.seq_len});
  in.position_ids = layout.position_tensor();
  in.video_indices = Tensor::from(layout.video_indices, {nv});
  in.audio_indices = Tensor::from(layout.audio_indices, {na});
  in.text_indices = Tensor::from(layout.text_indices, {spec.num_text});
  // The DiT reads [conditions; target] rows and returns velocities for all of them; only the target's are used.
  // The condition rows are fixed: converted to f32 once, not at every step.
  const Tensor cond_video = ncv > 0 ? f32_copy(spec.cond_video_rows) : Tensor();
  const Tensor cond_audio = nca > 0 ? f32_copy(spec.cond_audio_rows) : Tensor();

  for (int i = hooks.start_step; i < calls; ++i) {
    if (steps_done) *steps_done = i;
    ControlWord want = ControlWord::proceed;
    if (control.rank() == 0) {
      if (hooks.cancel && hooks.cancel())
        want = ControlWord::cancel;
      else if (hooks.suspend && hooks.suspend())
        want = ControlWord::suspend;
    }
    const ControlWord word = step_control(control, want);
    if (word != ControlWord::proceed) {
      if (end) *end = word == ControlWord::cancel ? LoopEnd::cancelled : LoopEnd::suspended;
      return x;
    }
    const RowTimesteps plan = plan_row_timesteps(layout, vs.timesteps[i], as.timesteps[i]);
    in.video = ncv > 0 ? concat_rows(cond_video, x.video) : x.video;
    in.audio = nca > 0 ? concat_rows(cond_audio, x.audio) : x.audio;
    in.timestep = Tensor::from(plan.timestep, {static_cast<int64_t>(plan.timestep.size())});
    in.timestep_indices = Tensor::from(plan.timestep_indices, {layout.seq_len});
    const auto t_forward = std::chrono::steady_clock::now();
    const DitOutputs out = dit.forward(in, spec.capture);
    if (hooks.forward_seconds)
      hooks.forward_seconds->push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t_forward).count());
    if (spec.on_capture && spec.capture.any()) spec.on_capture(i, out.activations);
    // The velocities are read in place: nothing else holds the forward's outputs, and nothing writes them.
    const Tensor v_video = target_velocity(out.video, ncv), v_audio = target_velocity(out.audio, nca);
    if (hooks.on_prediction && hooks.predict_at && hooks.predict_at(i, calls))
      hooks.on_prediction(i, calls, x0_prediction(x.video, v_video, vs.timesteps[i]));
    // Fresh buffers for the next rows: the forward may keep views of its inputs only for its own duration,
    // and the callback may hold on to the rows it was given. The Euler step writes them whole from x and v.
    SamplingRows next{Tensor::unfilled_host(DType::f32, x.video.shape()),
                      Tensor::unfilled_host(DType::f32, x.audio.shape())};
    euler_step_into(vs, i, next.video.span<float>(), cspan(x.video), cspan(v_video));
    euler_step_into(as, i, next.audio.span<float>(), cspan(x.audio), cspan(v_audio));
    x = std::move(next);
    if (steps_done) *steps_done = i + 1;
    if (hooks.on_step) hooks.on_step(i, calls, x);
  }
  if (steps_done) *steps_done = calls;
  return x;
}

bool follow_denoise_loop(const SamplingSpec& spec, Comm& control) {
  int done = 0;
  return follow_denoise_loop(spec, control, 0, &done) == LoopEnd::cancelled;
}

LoopEnd follow_denoise_loop(const SamplingSpec& spec, Comm& control, int start_step, int* steps_done) {
  const int calls = sampling_model_calls(spec);
  for (int i = start_step; i < calls; ++i) {
    if (steps_done) *steps_done = i;
    const ControlWord w = step_control(control, ControlWord::proceed);
    if (w == ControlWord::cancel) return LoopEnd::cancelled;
    if (w == ControlWord::suspend) return LoopEnd::suspended;
  }
  if (steps_done) *steps_done = calls;
  return LoopEnd::done;
}

Tensor rows_to_video_latents(const SamplingRows& rows, const SamplingSpec& spec, int64_t channels) {
  return f32_copy(unpatchify_video(rows.video, channels, spec.latent_frames, spec.latent_h, spec.latent_w));
}

Tensor rows_to_audio_latents(const SamplingRows& rows, const SamplingSpec& spec) {
  return f32_copy(unpack_audio(rows.audio, spec.audio_latents));
}

Tensor decode_video_latents(const VideoVae& vae, const Tensor& video_latents, Comm* comm) {
  const Tensor z = vae.denormalize(video_latents.to(vae.compute_dtype()));
  const Tensor dec = comm && comm->size() > 1 ? decode_video_sharded(vae, z, *comm) : vae.decode(z);
  return VideoVae::to_pixels01(dec);
}

Tensor decode_audio_latents(const AudioVae& vae, const Tensor& audio_latents, Comm* comm) {
  const Tensor z = vae.denormalize(audio_latents.to(vae.compute_dtype()));
  return comm && comm->size() > 1 ? decode_audio_sharded(vae, z, *comm) : vae.decode(z);
}

}  // namespace h3

#include "pipeline/sampling.h"

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

// [a; b] along rows (both f32, same width).
Tensor concat_rows(const Tensor& a, const Tensor& b) {
  H3_ASSERT(a.ndim() == 2 && b.ndim() == 2 && a.dim(1) == b.dim(1), "concat_rows {} {}", a.describe(), b.describe());
  Tensor out(DType::f32, {a.dim(0) + b.dim(0), a.dim(1)});
  std::memcpy(out.raw(), a.raw(), a.nbytes());
  std::memcpy(static_cast<std::byte*>(out.raw()) + a.nbytes(), b.raw(), b.nbytes());
  return out;
}

void check_shape(const Tensor& t, const Shape& want, const char* what) {
  H3_CHECK(t.shape() == want, "sampling: {} is {}, expected {}", what, shape_str(t.shape()), shape_str(want));
}

}  // namespace

SamplingRows denoise_loop(const DitModel& dit, const SamplingSpec& spec, const Tensor& prompt_embeds,
                          const Tensor& video_noise, const Tensor& audio_noise_rows, Comm& control,
                          const SamplingCancelFn& cancel, const SamplingStepFn& on_step, bool* cancelled) {
  const DitConfig& c = dit.config();
  if (cancelled) *cancelled = false;
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

  Tensor vnoise = video_noise;
  if (vnoise.ndim() == 5 && vnoise.dim(0) == 1)
    vnoise = vnoise.reshape({vnoise.dim(1), vnoise.dim(2), vnoise.dim(3), vnoise.dim(4)});
  check_shape(vnoise, {c.in_channels, spec.latent_frames, spec.latent_h, spec.latent_w}, "video noise");
  check_shape(audio_noise_rows, {2 * spec.audio_latents, c.audio_in_channels}, "audio noise rows");
  check_shape(prompt_embeds, {spec.num_text, c.text_dim}, "prompt embeddings");

  const int64_t nv = static_cast<int64_t>(layout.video_indices.size());
  const int64_t na = static_cast<int64_t>(layout.audio_indices.size());
  if (ncv > 0) check_shape(spec.cond_video_rows, {ncv, c.in_channels * kPatch * kPatch}, "condition video rows");
  if (nca > 0) check_shape(spec.cond_audio_rows, {nca, c.audio_in_channels}, "reference audio rows");
  SamplingRows x;
  x.video = f32_copy(patchify_video(f32_copy(vnoise)));
  x.audio = f32_copy(audio_noise_rows);
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
  auto with_conditions = [](const Tensor& cond, const Tensor& target) {
    return cond.defined() && cond.numel() > 0 ? concat_rows(f32_copy(cond), target) : target;
  };
  auto target_part = [](const Tensor& v, int64_t n_cond) {
    return n_cond > 0 ? f32_copy(v.rows(n_cond, v.dim(0))) : f32_copy(v);
  };

  const int calls = static_cast<int>(vs.num_steps());
  for (int i = 0; i < calls; ++i) {
    const bool want_cancel = control.rank() == 0 && cancel && cancel();
    if (step_control(control, want_cancel ? ControlWord::cancel : ControlWord::proceed) == ControlWord::cancel) {
      if (cancelled) *cancelled = true;
      return x;
    }
    const RowTimesteps plan = plan_row_timesteps(layout, vs.timesteps[i], as.timesteps[i]);
    in.video = ncv > 0 ? with_conditions(spec.cond_video_rows, x.video) : x.video;
    in.audio = nca > 0 ? with_conditions(spec.cond_audio_rows, x.audio) : x.audio;
    in.timestep = Tensor::from(plan.timestep, {static_cast<int64_t>(plan.timestep.size())});
    in.timestep_indices = Tensor::from(plan.timestep_indices, {layout.seq_len});
    const DitOutputs out = dit.forward(in, spec.capture);
    if (spec.on_capture && spec.capture.any()) spec.on_capture(i, out.activations);
    // Fresh buffers for the next rows: the forward may keep views of its inputs only for its own duration,
    // and the callback may hold on to the rows it was given.
    SamplingRows next{x.video.clone(), x.audio.clone()};
    const Tensor v_video = target_part(out.video, ncv), v_audio = target_part(out.audio, nca);
    euler_step(vs, i, next.video.span<float>(), cspan(v_video));
    euler_step(as, i, next.audio.span<float>(), cspan(v_audio));
    x = std::move(next);
    if (on_step) on_step(i, calls, x);
  }
  return x;
}

bool follow_denoise_loop(const SamplingSpec& spec, Comm& control) {
  const int calls = sampling_model_calls(spec);
  for (int i = 0; i < calls; ++i)
    if (step_control(control, ControlWord::proceed) == ControlWord::cancel) return true;
  return false;
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

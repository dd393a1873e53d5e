#include "pipeline/t2va.h"

#include <cstring>

#include "dist/control.h"
#include "model/vae_shard.h"

namespace h3 {

PackedLayout t2va_layout(const T2vaSpec& spec) {
  H3_CHECK(spec.num_text >= 1, "t2va: the prompt has no tokens (an empty prompt embedding)");
  const TargetGrid grid{spec.latent_frames, spec.latent_h, spec.latent_w, spec.audio_latents};
  return build_fl2va_layout(text_tags_with_vision(spec.num_text, {}), grid, {});
}

void t2va_schedules(const T2vaSpec& spec, FlowSchedule& video, FlowSchedule& audio) {
  video = make_flow_schedule(spec.steps, spec.shift);
  audio = make_flow_schedule(spec.steps, spec.audio_shift);
  // Both schedulers advance with the same step index; a grid whose f32 values collide under one shift but not
  // the other would leave them with different lengths.
  H3_CHECK(
      video.num_steps() == audio.num_steps(),
      "{} steps with shifts {} / {}: the video schedule has {} distinct steps but the audio one {} (f32 grid "
      "points collide); use fewer steps or other shifts",
      spec.steps, spec.shift, spec.audio_shift, video.num_steps(), audio.num_steps());
}

int t2va_model_calls(const T2vaSpec& spec) {
  FlowSchedule v, a;
  t2va_schedules(spec, v, a);
  return static_cast<int>(v.num_steps());
}

namespace {

Tensor f32_copy(const Tensor& t) {
  return t.to(DType::f32);
}
std::span<const float> cspan(const Tensor& t) {
  return {t.data<float>(), static_cast<size_t>(t.numel())};
}

void check_shape(const Tensor& t, const Shape& want, const char* what) {
  H3_CHECK(t.shape() == want, "t2va: {} is {}, expected {}", what, shape_str(t.shape()), shape_str(want));
}

}  // namespace

T2vaRows denoise_t2va(const DitModel& dit, const T2vaSpec& spec, const Tensor& prompt_embeds,
                      const Tensor& video_noise, const Tensor& audio_noise_rows, Comm& control,
                      const T2vaCancelFn& cancel, const T2vaStepFn& on_step, bool* cancelled) {
  const DitConfig& c = dit.config();
  if (cancelled) *cancelled = false;
  const PackedLayout layout = t2va_layout(spec);
  FlowSchedule vs, as;
  t2va_schedules(spec, vs, as);

  Tensor vnoise = video_noise;
  if (vnoise.ndim() == 5 && vnoise.dim(0) == 1)
    vnoise = vnoise.reshape({vnoise.dim(1), vnoise.dim(2), vnoise.dim(3), vnoise.dim(4)});
  check_shape(vnoise, {c.in_channels, spec.latent_frames, spec.latent_h, spec.latent_w}, "video noise");
  check_shape(audio_noise_rows, {2 * spec.audio_latents, c.audio_in_channels}, "audio noise rows");
  check_shape(prompt_embeds, {spec.num_text, c.text_dim}, "prompt embeddings");

  const int64_t nv = static_cast<int64_t>(layout.video_indices.size());
  const int64_t na = static_cast<int64_t>(layout.audio_indices.size());
  T2vaRows x;
  x.video = f32_copy(patchify_video(f32_copy(vnoise)));
  x.audio = f32_copy(audio_noise_rows);
  H3_ASSERT(x.video.dim(0) == nv && x.audio.dim(0) == na, "t2va rows {} / {} vs layout {} / {}",
            x.video.dim(0), x.audio.dim(0), nv, na);

  // Everything but the rows and the timesteps is the same at every step.
  DitInputs in;
  in.text = f32_copy(prompt_embeds);
  in.token_tags = Tensor::from(layout.token_tags, {layout.seq_len});
  in.position_ids = layout.position_tensor();
  in.video_indices = Tensor::from(layout.video_indices, {nv});
  in.audio_indices = Tensor::from(layout.audio_indices, {na});
  in.text_indices = Tensor::from(layout.text_indices, {spec.num_text});

  const int calls = static_cast<int>(vs.num_steps());
  for (int i = 0; i < calls; ++i) {
    const bool want_cancel = control.rank() == 0 && cancel && cancel();
    if (step_control(control, want_cancel ? ControlWord::cancel : ControlWord::proceed) ==
        ControlWord::cancel) {
      if (cancelled) *cancelled = true;
      return x;
    }
    const RowTimesteps plan = plan_row_timesteps(layout, vs.timesteps[i], as.timesteps[i]);
    in.video = x.video;
    in.audio = x.audio;
    in.timestep = Tensor::from(plan.timestep, {static_cast<int64_t>(plan.timestep.size())});
    in.timestep_indices = Tensor::from(plan.timestep_indices, {layout.seq_len});
    const DitOutputs out = dit.forward(in);
    // Fresh buffers for the next rows: the forward may keep views of its inputs only for its own duration,
    // and the callback may hold on to the rows it was given.
    T2vaRows next{x.video.clone(), x.audio.clone()};
    const Tensor v_video = f32_copy(out.video), v_audio = f32_copy(out.audio);
    euler_step(vs, i, next.video.span<float>(), cspan(v_video));
    euler_step(as, i, next.audio.span<float>(), cspan(v_audio));
    x = std::move(next);
    if (on_step) on_step(i, calls, x);
  }
  return x;
}

bool follow_t2va_denoise(const T2vaSpec& spec, Comm& control) {
  const int calls = t2va_model_calls(spec);
  for (int i = 0; i < calls; ++i)
    if (step_control(control, ControlWord::proceed) == ControlWord::cancel) return true;
  return false;
}

Tensor t2va_video_latents(const T2vaRows& rows, const T2vaSpec& spec, int64_t channels) {
  return f32_copy(unpatchify_video(rows.video, channels, spec.latent_frames, spec.latent_h, spec.latent_w));
}

Tensor t2va_audio_latents(const T2vaRows& rows, const T2vaSpec& spec) {
  return f32_copy(unpack_audio(rows.audio, spec.audio_latents));
}

Tensor decode_t2va_video(const VideoVae& vae, const Tensor& video_latents, Comm* comm) {
  const Tensor z = vae.denormalize(video_latents.to(vae.compute_dtype()));
  const Tensor dec = comm && comm->size() > 1 ? decode_video_sharded(vae, z, *comm) : vae.decode(z);
  return VideoVae::to_pixels01(dec);
}

Tensor decode_t2va_audio(const AudioVae& vae, const Tensor& audio_latents, Comm* comm) {
  const Tensor z = vae.denormalize(audio_latents.to(vae.compute_dtype()));
  return comm && comm->size() > 1 ? decode_audio_sharded(vae, z, *comm) : vae.decode(z);
}

}  // namespace h3

// The sampling loop of every mode (t2va, fl2va, ref2va; h3-model-spec §3.3, §4): packed layout -> the two flow
// schedules (video shift, audio shift, same grid) -> for each step one DiT forward and one Euler update of the
// video rows and of the audio rows -> unpatchify -> video VAE decode + audio VAE decode.
//
// Rows (the DiT's own layout, model/dit/layout.h): video rows [T*(h/2)*(w/2), C*4] (patchified latents; fl2va /
// ref2va put their fixed condition rows first), audio rows [2A, C_a] with row = ch*A + a. Latents stay f32 for the
// whole loop; the DiT runs in its precision and returns f32 velocities (f64 runs are rounded to f32 before the update,
// like the reference's f32 latents).
//
// Distribution: the DiT forward runs on the model's plan (the denoise ranks); every rank of `control` (a
// superset: the whole group, encoder ranks included) takes part in one step-control broadcast per step, so a
// cancel on rank 0 of `control` stops every rank at the same step. Ranks outside the denoise group call
// follow_denoise_loop() instead of denoise_loop(). Results are identical on every rank.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>

#include "core/tensor.h"
#include "distributed/comm.h"
#include "model/dit/dit.h"
#include "model/dit/layout.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"
#include "pipeline/schedule.h"

namespace h3 {

struct SamplingSpec {
  int64_t latent_frames = 0, latent_h = 0, latent_w = 0;  // T, h, w of the video latents
  int64_t audio_latents = 0;                              // A per stereo channel
  int64_t num_text = 0;                                   // L prompt rows
  int steps = 4;                                          // schedule grid points N (N-1 DiT calls)
  double shift = kVideoShift, audio_shift = kAudioShift;
  // fl2va / ref2va (pipeline/conditions.h): the packed layout with its condition rows, which lead the video
  // and audio row lists and stay fixed through the loop (only the target rows are stepped). Null = the t2va
  // layout (all text rows tagged text, no conditions).
  std::shared_ptr<const PackedLayout> layout;
  Tensor cond_video_rows;  // [layout->num_condition_video_rows, C*4] f32
  Tensor cond_audio_rows;  // [layout->num_condition_audio_rows, C_a] f32
  // Debugging against a reference: the DiT's named intermediates to keep at every step (DitCapture,
  // model/dit/hooks.h: none by default; the same on every denoise rank), handed to on_capture with the step.
  DitCapture capture;
  std::function<void(int step, const std::map<std::string, Tensor>& intermediates)> on_capture;
};

struct SamplingRows {
  Tensor video;  // [T*(h/2)*(w/2), C*4] f32
  Tensor audio;  // [2A, C_a] f32
};

// Called after every Euler update (step = 0 .. calls-1) with the current rows.
using SamplingStepFn = std::function<void(int step, int calls, const SamplingRows& rows)>;
// Asked once per step on rank 0 of the control group before the step; true = cancel.
using SamplingCancelFn = std::function<bool()>;

// The packed t2va layout of a spec (text tags all 1, no conditions).
PackedLayout t2va_layout(const SamplingSpec& spec);
// The schedules of a spec; throws when the two grids do not have the same number of model calls.
void sampling_schedules(const SamplingSpec& spec, FlowSchedule& video, FlowSchedule& audio);
int sampling_model_calls(const SamplingSpec& spec);

// Runs the loop on the denoise ranks. `prompt_embeds` [L, text_dim], `video_noise` [C, T, h, w] (or
// [1, C, T, h, w]), `audio_noise_rows` [2A, C_a], all f32. Returns the final rows; returns early with
// `*cancelled = true` (identically on every rank) when the control word says so.
SamplingRows denoise_loop(const DitModel& dit, const SamplingSpec& spec, const Tensor& prompt_embeds,
                          const Tensor& video_noise, const Tensor& audio_noise_rows, Comm& control,
                          const SamplingCancelFn& cancel, const SamplingStepFn& on_step, bool* cancelled);
// What a rank outside the denoise group does meanwhile: the same control broadcasts, nothing else. Returns
// true when cancelled.
bool follow_denoise_loop(const SamplingSpec& spec, Comm& control);

// Final rows -> latents: video [C, T, h, w] and audio [2, C_a, A] (both f32).
Tensor rows_to_video_latents(const SamplingRows& rows, const SamplingSpec& spec, int64_t channels);
Tensor rows_to_audio_latents(const SamplingRows& rows, const SamplingSpec& spec);

// Latents -> media. Video: denormalize, decode (sharded over `comm` when given), clamp to [0, 1] pixels
// [3, frames, H, W]. Audio: denormalize, decode -> waveform [2, 1, A*hop] in [-1, 1]. Collective over `comm`.
Tensor decode_video_latents(const VideoVae& vae, const Tensor& video_latents, Comm* comm);
Tensor decode_audio_latents(const AudioVae& vae, const Tensor& audio_latents, Comm* comm);

}  // namespace h3

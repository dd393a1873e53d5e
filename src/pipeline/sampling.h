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
#include <vector>

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

// How a loop ended: every step made, cancelled, or suspended at a step boundary (the rows then are those after
// `steps_done` calls, from which a later loop continues bitwise as if it had never stopped).
enum class LoopEnd { done, cancelled, suspended };

// The x0 prediction of the video target rows after a DiT call: x + (1 - t) v in the Euler step's own f32 order
// (schedule.h), computed into a fresh tensor, so nothing done with it reaches the rows.
using SamplingPredictionFn = std::function<void(int step, int calls, const Tensor& x0_video_rows)>;

// Everything the loop does besides stepping; each part optional.
struct SamplingHooks {
  SamplingCancelFn cancel;   // rank 0 of the control group, before each step: true = cancel
  SamplingCancelFn suspend;  // rank 0, before each step (a cancel wins): true = stop here, keeping the rows
  SamplingStepFn on_step;
  // Asked after each DiT call (on every rank: answer false where no prediction is wanted); when true,
  // on_prediction gets the call's x0 prediction before the Euler update.
  std::function<bool(int step, int calls)> predict_at;
  SamplingPredictionFn on_prediction;
  // When set, each DiT call's own wall time (the forward, its inputs' upload and outputs' download included; not the
  // step's other work) is appended: against the step's time, what the loop adds to h3 bench's forward.
  std::vector<double>* forward_seconds = nullptr;
  // Resuming: the DiT calls already made and the rows after them (undefined rows: start from the noise).
  int start_step = 0;
  SamplingRows start_rows;
};

// The loop with hooks; `*end` says how it ended and `*steps_done` how many DiT calls the returned rows have had.
SamplingRows denoise_loop(const DitModel& dit, const SamplingSpec& spec, const Tensor& prompt_embeds,
                          const Tensor& video_noise, const Tensor& audio_noise_rows, Comm& control,
                          const SamplingHooks& hooks, LoopEnd* end, int* steps_done);
// What a rank outside the denoise group does meanwhile: the same control broadcasts, nothing else. Returns
// true when cancelled.
bool follow_denoise_loop(const SamplingSpec& spec, Comm& control);
// The same from `start_step`; returns how the loop ended and sets `*steps_done` like denoise_loop.
LoopEnd follow_denoise_loop(const SamplingSpec& spec, Comm& control, int start_step, int* steps_done);

// Final rows -> latents: video [C, T, h, w] and audio [2, C_a, A] (both f32).
Tensor rows_to_video_latents(const SamplingRows& rows, const SamplingSpec& spec, int64_t channels);
Tensor rows_to_audio_latents(const SamplingRows& rows, const SamplingSpec& spec);

// Latents -> media. Video: denormalize, decode (sharded over `comm` when given), clamp to [0, 1] pixels
// [3, frames, H, W]. Audio: denormalize, decode -> waveform [2, 1, A*hop] in [-1, 1]. Collective over `comm`.
Tensor decode_video_latents(const VideoVae& vae, const Tensor& video_latents, Comm* comm);
Tensor decode_audio_latents(const AudioVae& vae, const Tensor& audio_latents, Comm* comm);

}  // namespace h3

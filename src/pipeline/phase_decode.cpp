// The decode phase (phases.h): every rank, units sharded over the group. The VAEs load with the video decode when not
// resident. One rank with a GPU VAE streams the finished frames to the MP4's encoder (a CPU thread) while the GPU
// decodes on, and tells it the video's end before the audio decode. The audio stays after the video: decoded first it
// would delay the video's frames, whose encode is the long pole, by its own time (docs/notes.md, issue 40).
#include "pipeline/phases.h"

namespace h3 {

Decoded decode_phase(RequestRun& run, ModelResidency& models, const Denoised& den, const std::string& out_path) {
  Comm& comm = run.comm;
  Comm* group = comm.size() > 1 ? &comm : nullptr;
  Decoded out;
  run.check_cancel("before the video decode");
  const PhaseMeter video_meter(models.gpu());
  run.report("decode_video", 0, 1, RequestRun::w_encode + RequestRun::w_denoise, RequestRun::w_video);
  if (!models.video_vae()) models.load_vaes();
  const VideoVae& vvae = *models.video_vae();
  auto t0 = phase_clock::now();
  if (comm.size() == 1 && !out_path.empty() && !models.options().keep_media && vvae.device() == Device::cuda) {
    out.mp4 =
        std::make_unique<StreamingMp4>(out_path, media_spec(models.sources(), run.res.request), VideoVae::to_pixels01);
    const Tensor z = vvae.denormalize(run.res.video_latents.to(vvae.compute_dtype()));
    // Units per stacked call: the plan's under the budget (0 on the CPU or without a plan: the VAE's own rule).
    vvae.decode_streaming(
        z, [&](int64_t, const Tensor& frames) { out.mp4->add_frames(frames); }, models.placement().vae_batch);
    // libx264 encodes the ~40 frames it still holds while the GPU decodes the audio (StreamingMp4's header).
    out.mp4->end_video();
  } else {
    out.pixels = decode_video_latents(vvae, run.res.video_latents, group);
  }
  phase_done(run, models, "decode_video", t0, models.loads().size());
  video_meter.done("decode_video", run.res);
  run.check_cancel("before the audio decode");
  const PhaseMeter audio_meter(models.gpu());
  t0 = phase_clock::now();
  run.report("decode_audio", 0, 1, RequestRun::w_encode + RequestRun::w_denoise + RequestRun::w_video,
             RequestRun::w_audio);
  out.wave = decode_audio_latents(*models.audio_vae(), rows_to_audio_latents(den.rows, den.spec), group);
  phase_done(run, models, "decode_audio", t0, models.loads().size());
  audio_meter.done("decode_audio", run.res);
  models.after_decode();
  run.check_cancel("before writing");
  return out;
}

}  // namespace h3

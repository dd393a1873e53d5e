#include "pipeline/synthetic.h"

#include "model/dit/layout.h"
#include "pipeline/noise.h"

namespace h3 {

DitInputs make_synthetic_inputs(const DitConfig& c, const SyntheticRequest& r) {
  Geometry g = make_geometry(r.num_frames, r.height, r.width);
  TargetGrid grid{g.latent_frames, g.latent_h, g.latent_w, g.audio_latents};
  PackedLayout layout = build_fl2va_layout(text_tags_with_vision(r.num_text, {}), grid, {});
  RowTimesteps plan = plan_row_timesteps(layout, r.t_video, r.t_audio);
  const int64_t nv = static_cast<int64_t>(layout.video_indices.size());
  const int64_t na = static_cast<int64_t>(layout.audio_indices.size());
  DitInputs in;
  in.video = seeded_normal({nv, c.video_patch_dim()}, r.seed, 1);
  in.audio = seeded_normal({na, c.audio_in_channels}, r.seed, 2);
  in.text = seeded_normal({r.num_text, c.text_dim}, r.seed, 3);
  in.timestep = Tensor::from(plan.timestep, {static_cast<int64_t>(plan.timestep.size())});
  in.timestep_indices = Tensor::from(plan.timestep_indices, {layout.seq_len});
  in.token_tags = Tensor::from(layout.token_tags, {layout.seq_len});
  in.position_ids = layout.position_tensor();
  in.video_indices = Tensor::from(layout.video_indices, {nv});
  in.audio_indices = Tensor::from(layout.audio_indices, {na});
  in.text_indices = Tensor::from(layout.text_indices, {r.num_text});
  return in;
}

}  // namespace h3

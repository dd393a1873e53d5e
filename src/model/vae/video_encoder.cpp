// The video VAE's causal 3D-CNN encoder on one clip/tile (spec §6.2): conv_in -> levels of ResNet blocks with a
// strided downsampling conv -> GroupNorm -> SiLU -> conv_out -> quant_conv. Causal convs pad the spatial borders
// (reflect) and put kernel_t - 1 zero frames in front; GroupNorm statistics are per frame.
#include "model/vae/video_vae.h"
#include "ops/ops.h"

namespace h3 {

namespace {
ops::PadMode pad_mode(const std::string& m) {
  if (m == "zeros") return ops::PadMode::zeros;
  if (m == "replicate") return ops::PadMode::replicate;
  return ops::PadMode::reflect;
}
}  // namespace

Tensor VideoVae::causal_conv(const Tensor& x, const Tensor& w, const Tensor& b, int64_t spatial_pad) const {
  const int64_t kt = w.dim(2);
  Tensor xp =
      ops::pad3d(x, kt - 1, spatial_pad, spatial_pad, spatial_pad, spatial_pad, pad_mode(cfg_.spatial_padding_mode));
  return ops::conv3d(xp, w, &b, {1, 1, 1});
}

Tensor VideoVae::resnet(const Resnet& r, const Tensor& x) const {
  const int64_t G = cfg_.norm_num_groups;
  Tensor h = ops::silu(ops::group_norm_frames(x, G, &r.n1_w, &r.n1_b, cfg_.norm_eps));
  h = causal_conv(h, r.c1_w, r.c1_b, 1);
  h = ops::silu(ops::group_norm_frames(h, G, &r.n2_w, &r.n2_b, cfg_.norm_eps));
  h = causal_conv(h, r.c2_w, r.c2_b, 1);
  Tensor res = r.sc_w.ndim() == 5 ? ops::conv3d(x, r.sc_w, &r.sc_b, {1, 1, 1}) : x;
  return ops::add(res, h);
}

Tensor VideoVae::encode_block(const Tensor& x) const {
  H3_CHECK(has_encoder_, "video VAE encode: this checkpoint has no encoder weights (encoder.*)");
  Tensor h = causal_conv(x.to(ct_), conv_in_w_, conv_in_b_, 1);
  for (const Level& lv : levels_) {
    for (const Resnet& r : lv.resnets) h = resnet(r, h);
    if (lv.down_w.ndim() == 5) {
      // Spatial stride 2: pad right/bottom by one, no other spatial padding; causal temporal pad of 2 frames.
      const int64_t extra = lv.ss == 2 ? 1 : 0;
      Tensor hp = ops::pad3d(h, 2, 0, extra, 0, extra, pad_mode(cfg_.spatial_padding_mode));
      h = ops::conv3d(hp, lv.down_w, &lv.down_b, {lv.ts, lv.ss, lv.ss});
    }
  }
  h = ops::silu(ops::group_norm_frames(h, cfg_.norm_num_groups, &norm_out_enc_w_, &norm_out_enc_b_, cfg_.norm_eps));
  h = causal_conv(h, conv_out_w_, conv_out_b_, 1);
  return ops::conv3d(h, quant_w_, &quant_b_, {1, 1, 1});
}

}  // namespace h3

// Previews while denoising (RunHooks::preview_every in generator.h): after a DiT call, the x0 prediction
// x + (1 - t) v of the video rows, its first temporal decode chunk through the real video VAE, one frame of it
// scaled to a small picture.
//
// Why the first chunk. The VAE decodes in temporal chunks of n + o latent frames (video_vae.h; 7 in the released
// geometry), and the frames of chunk 0's first part are final once chunk 0 is decoded: no later chunk cross-fades
// into them. Decoding the prediction's first n + o latent frames as a short video of their own therefore gives
// exactly (bitwise) the first frames a full decode of the same latents gives, for 1/7 of a 124-frame decode's work,
// at the video's full resolution. A lower-resolution decode of pooled latents would cost less but shows a picture no
// decode of the latents ever makes; a linear latent-to-RGB map costs nothing but is no VAE picture. The cost
// arithmetic (the default every 10 DiT calls) is in docs/notes.md.
#pragma once
#include <cstdint>

#include "core/tensor.h"
#include "model/vae/video_vae.h"

namespace h3 {

inline constexpr int64_t kPreviewMaxWidth = 480;  // the picture's width at most (the server's poster width too)
inline constexpr int kDefaultPreviewEvery = 10;   // DiT calls between previews (docs/notes.md: <= 2 % at 768p)

// Which latent frames a preview decodes and which of the decoded frames it shows.
struct PreviewSpan {
  int64_t latent_frames = 0;  // the prediction's first latent frames decoded (the first chunk's span, or all)
  int64_t frame = 0;          // the frame shown: the last one the full decode finishes with its first chunk
};
PreviewSpan preview_span(const VideoVaeConfig& c, int64_t latent_frames);

// The picture of x0 latents [C, T, h, w] (the prediction, not de-normalised): their span decoded, frame `span.frame`
// in [0, 1] pixels, scaled down to at most `max_width` wide. Returns [3, H', W'] f32.
Tensor preview_picture(const VideoVae& vae, const Tensor& x0_latents, const PreviewSpan& span,
                       int64_t max_width = kPreviewMaxWidth);

// [3, H, W] pixels averaged over areas down to at most `max_width` wide (the aspect kept, at least 1 x 1); the same
// tensor when it is narrow enough. f32.
Tensor downscale_picture(const Tensor& rgb, int64_t max_width);

}  // namespace h3

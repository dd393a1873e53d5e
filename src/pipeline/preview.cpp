// Previews while denoising (pipeline/preview.h).
#include "pipeline/preview.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.h"
#include "model/vae/tiling.h"

namespace h3 {

PreviewSpan preview_span(const VideoVaeConfig& c, int64_t latent_frames) {
  const TemporalChunkPlan full = plan_temporal_chunks(latent_frames, c.clip_length, c.token_drop, c.temporal_ratio());
  PreviewSpan s;
  // Chunk 0 decodes padded latent frames [0, chunk_len(0)); with one chunk (or padding inside it) that is the video.
  s.latent_frames = std::min(latent_frames, full.chunk_len(0));
  const TemporalChunkPlan part =
      s.latent_frames == latent_frames
          ? full
          : plan_temporal_chunks(s.latent_frames, c.clip_length, c.token_drop, c.temporal_ratio());
  // Chunk 0's first part: its frames past the pre-padding, final once chunk 0 is decoded.
  const int64_t q = c.temporal_ratio();
  const int64_t first_part =
      std::max<int64_t>(std::min(full.chunk_frames, full.chunk_len(0) * q) - full.frame_pre_padding, int64_t{1});
  s.frame = std::clamp<int64_t>(first_part - 1, 0, std::min(full.out_frames, part.out_frames) - 1);
  return s;
}

Tensor preview_picture(const VideoVae& vae, const Tensor& x0_latents, const PreviewSpan& span, int64_t max_width) {
  H3_CHECK(x0_latents.ndim() == 4 && x0_latents.dim(1) >= span.latent_frames && span.latent_frames > 0,
           "preview: latents {} for a span of {} latent frames", x0_latents.describe(), span.latent_frames);
  // De-normalising is per channel, so the span can be cut first; the rest is the final decode's own path.
  const Tensor first = vae::slice_dim(x0_latents.to(vae.compute_dtype()), 1, 0, span.latent_frames);
  const Tensor z = vae.denormalize(first);
  Tensor frame;
  vae.decode_streaming(z, [&](int64_t first_frame, const Tensor& frames) {
    const int64_t k = span.frame - first_frame;
    if (k >= 0 && k < frames.dim(1)) frame = vae::slice_dim(frames, 1, k, k + 1);
  });
  H3_CHECK(frame.defined(), "preview: the decode of {} latent frames gave no frame {}", span.latent_frames, span.frame);
  const Tensor px = VideoVae::to_pixels01(frame).to(DType::f32);  // [3, 1, H, W]
  return downscale_picture(px.reshape({px.dim(0), px.dim(2), px.dim(3)}), max_width);
}

namespace {

// The weights of an area-average from n source samples to m (m <= n): output i covers [i n/m, (i+1) n/m).
struct AreaTaps {
  std::vector<int64_t> first;          // first source sample of each output
  std::vector<std::vector<double>> w;  // its weights (summing to 1)
};

AreaTaps area_taps(int64_t n, int64_t m) {
  AreaTaps t;
  const double scale = static_cast<double>(n) / static_cast<double>(m);
  for (int64_t i = 0; i < m; ++i) {
    const double a = static_cast<double>(i) * scale, b = static_cast<double>(i + 1) * scale;
    const int64_t lo = static_cast<int64_t>(std::floor(a)),
                  hi = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(b)));
    std::vector<double> w;
    for (int64_t j = lo; j < hi; ++j)
      w.push_back((std::min(b, static_cast<double>(j + 1)) - std::max(a, static_cast<double>(j))) / scale);
    t.first.push_back(lo);
    t.w.push_back(std::move(w));
  }
  return t;
}

}  // namespace

Tensor downscale_picture(const Tensor& rgb, int64_t max_width) {
  H3_CHECK(rgb.ndim() == 3 && rgb.dim(0) == 3 && max_width > 0, "downscale_picture: expected [3, H, W], got {}",
           rgb.describe());
  const Tensor src = rgb.to(DType::f32);
  const int64_t H = src.dim(1), W = src.dim(2);
  if (W <= max_width) return src;
  const int64_t ow = max_width;
  const int64_t oh = std::max<int64_t>(1, (H * ow + W / 2) / W);
  const AreaTaps tx = area_taps(W, ow), ty = area_taps(H, oh);
  Tensor out(DType::f32, {3, oh, ow});
  const float* s = src.data<float>();
  float* o = out.data<float>();
  std::vector<double> row(static_cast<size_t>(ow));
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t y = 0; y < oh; ++y) {
      std::fill(row.begin(), row.end(), 0.0);
      for (size_t j = 0; j < ty.w[y].size(); ++j) {
        const float* line = s + (c * H + ty.first[y] + static_cast<int64_t>(j)) * W;
        for (int64_t x = 0; x < ow; ++x) {
          double v = 0;
          for (size_t k = 0; k < tx.w[x].size(); ++k) v += tx.w[x][k] * line[tx.first[x] + static_cast<int64_t>(k)];
          row[x] += ty.w[y][j] * v;
        }
      }
      for (int64_t x = 0; x < ow; ++x) o[(c * oh + y) * ow + x] = static_cast<float>(std::clamp(row[x], 0.0, 1.0));
    }
  return out;
}

}  // namespace h3

// The video decode as a stream of finished frames: which frames each temporal chunk finishes (frame_schedule), the
// per-pixel stitch of those frames where the units are (ops::stitch_frames), units stacked per ViT call, and the
// chunk-row loop that keeps at most two rows of units alive (decode_streaming) or fills one host clip (decode()
// on a GPU VAE, stitch_on_device). Every path gives bitwise the frames of VideoVae::stitch (model/vae/video_vae.cpp).
#include <algorithm>
#include <cstring>
#include <memory>
#include <tuple>

#include "core/device.h"
#include "core/profile.h"
#include "model/vae/tiling.h"
#include "model/vae/video_vae.h"

namespace h3 {

std::vector<std::vector<ops::StitchFrame>> frame_schedule(const VideoDecodePlan& plan, bool two_parts) {
  // Mirrors VideoVae::stitch: chunk i's clip has clip_frames = chunk_len(i) * q frames; part j is the clip's frames
  // [j * chunk_frames, (j + 1) * chunk_frames) clamped to the clip, less its first frame_pre_padding frames (both
  // cuts clamp as slice_dim does). Part 0 cross-fades from the previous chunk's part 1 over
  // e = min(|overlap|, |part 0|, frame_overlap) frames; part 1 of the last chunk closes the video.
  const TemporalChunkPlan& tp = plan.time;
  const int64_t q = plan.time.chunk_tokens > 0 ? tp.chunk_frames / tp.chunk_tokens : 1;
  auto part = [&](size_t i, int64_t j, int64_t& first, int64_t& count) {
    const int64_t clip_frames = tp.chunk_len(i) * q;
    const int64_t b = std::clamp<int64_t>(j * tp.chunk_frames, 0, clip_frames);
    const int64_t e = std::clamp<int64_t>(j * tp.chunk_frames + tp.chunk_frames, b, clip_frames);
    const int64_t pre = std::min(tp.frame_pre_padding, e - b);
    first = b + pre;
    count = e - b - pre;
  };
  std::vector<std::vector<ops::StitchFrame>> sched(tp.starts.size());
  int64_t ov_first = 0, ov_count = 0;
  bool have_overlap = false;
  for (size_t i = 0; i < tp.starts.size(); ++i) {
    int64_t first = 0, count = 0;
    part(i, 0, first, count);
    const int64_t e = have_overlap && ov_count > 0 ? std::min({ov_count, count, tp.frame_overlap}) : 0;
    for (int64_t p = 0; p < count; ++p) {
      ops::StitchFrame f;
      f.frame = first + p;
      if (p < e) {
        f.prev_frame = ov_first + ov_count - e + p;
        f.fade_p = p;
        f.fade_e = e;
      }
      sched[i].push_back(f);
    }
    if (two_parts) {
      part(i, 1, ov_first, ov_count);
      have_overlap = true;
    }
  }
  if (have_overlap && !sched.empty())
    for (int64_t p = 0; p < ov_count; ++p) sched.back().push_back({ov_first + p, 0, 0, 0});
  // The trailing frames produced by the padding are dropped from the end.
  for (int64_t k = tp.trim_frames; k > 0; --k) {
    auto it = std::find_if(sched.rbegin(), sched.rend(), [](const auto& v) { return !v.empty(); });
    H3_ASSERT(it != sched.rend(), "video VAE frame schedule: trims {} frames of a shorter video", tp.trim_frames);
    it->pop_back();
  }
  return sched;
}

ops::StitchGrid stitch_grid(const VideoDecodePlan& plan) {
  ops::StitchGrid g;
  g.rows = static_cast<int64_t>(plan.rows.starts.size());
  g.cols = static_cast<int64_t>(plan.cols.starts.size());
  g.row_overlaps = plan.rows.overlaps;
  g.col_overlaps = plan.cols.overlaps;
  return g;
}

namespace {
// Emits chunk i's scheduled frames from its tiles (and the previous chunk's), a few frames per stitch call, on the
// tiles' device.
void emit_chunk_frames(const std::vector<ops::StitchFrame>& frames, const std::vector<Tensor>& cur,
                       const std::vector<Tensor>& prev, const ops::StitchGrid& grid, int64_t& next_frame,
                       const VideoVae::FrameSink& sink) {
  constexpr size_t kFramesPerCall = 24;  // one download of 24 768p frames in f32 is 297 MB
  for (size_t k0 = 0; k0 < frames.size(); k0 += kFramesPerCall) {
    const std::vector<ops::StitchFrame> part(frames.begin() + k0,
                                             frames.begin() + std::min(frames.size(), k0 + kFramesPerCall));
    Tensor f;
    {
      profile::Region r("vae.stitch");
      f = ops::stitch_frames(cur, prev, grid, part);
    }
    sink(next_frame, f);
    next_frame += static_cast<int64_t>(part.size());
  }
}

std::vector<Tensor> chunk_tiles(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded, size_t chunk) {
  const size_t n = plan.rows.starts.size() * plan.cols.starts.size();
  return std::vector<Tensor>(decoded.begin() + chunk * n, decoded.begin() + (chunk + 1) * n);
}

// Frames [C, n, H, W] (host or device) into video[:, first : first + n] of a host clip [C, F, H, W]: one copy per
// channel, a download straight into place for device frames.
void place_frames(Tensor& video, int64_t first, const Tensor& frames) {
  const int64_t C = video.dim(0), F = video.dim(1), H = video.dim(2), W = video.dim(3), n = frames.dim(1);
  H3_ASSERT(frames.ndim() == 4 && frames.dtype() == video.dtype() && frames.dim(0) == C && frames.dim(2) == H &&
                frames.dim(3) == W && first >= 0 && first + n <= F,
            "video VAE decode: frames {} at {} for a clip {}", frames.describe(), first, video.describe());
  const size_t plane = static_cast<size_t>(H * W) * dtype_size(video.dtype());
  profile::Region r("vae.download");
  for (int64_t c = 0; c < C; ++c) {
    void* dst = static_cast<std::byte*>(video.raw()) + (c * F + first) * plane;
    const void* src = static_cast<const std::byte*>(frames.raw()) + c * n * plane;
    if (frames.on_device())
      device_hooks().copy(dst, false, src, true, n * plane);
    else
      std::memcpy(dst, src, n * plane);
  }
}

// The host clip, not zero-filled: every frame is written once by place_frames (the callers check the count). A
// zero-filled Tensor would touch all of it (1.54 GB at 768p x 124) once more before the downloads do.
Tensor empty_clip(const VideoDecodePlan& plan, const VideoVaeConfig& cfg, DType dt) {
  const Shape s{cfg.out_channels, plan.time.out_frames, plan.latent_height * cfg.spatial_ratio(),
                plan.latent_width * cfg.spatial_ratio()};
  return Tensor::unfilled_host(dt, s);
}
}  // namespace

Tensor VideoVae::stitch_on_device(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded) const {
  H3_CHECK(decoded.size() == plan.units.size(), "video VAE stitch: {} decoded units for a plan of {}", decoded.size(),
           plan.units.size());
  const auto sched = frame_schedule(plan, cfg_.token_drop > 0);
  const ops::StitchGrid grid = stitch_grid(plan);
  Tensor video = empty_clip(plan, cfg_, ct_);
  std::vector<Tensor> prev, cur;
  int64_t next = 0;
  for (size_t i = 0; i < sched.size(); ++i) {
    cur = chunk_tiles(plan, decoded, i);
    for (Tensor& t : cur) t = t.to_device(dev_);
    emit_chunk_frames(sched[i], cur, prev, grid, next,
                      [&](int64_t first, const Tensor& f) { place_frames(video, first, f); });
    prev = std::move(cur);
    cur.clear();
  }
  H3_ASSERT(next == plan.time.out_frames, "video VAE stitch: {} frames, plan says {}", next, plan.time.out_frames);
  return video;
}

void VideoVae::stitch_streaming(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded,
                                const FrameSink& sink) const {
  H3_CHECK(decoded.size() == plan.units.size(), "video VAE stitch: {} decoded units for a plan of {}", decoded.size(),
           plan.units.size());
  const auto sched = frame_schedule(plan, cfg_.token_drop > 0);
  const ops::StitchGrid grid = stitch_grid(plan);
  int64_t next = 0;
  const FrameSink to_host = [&](int64_t first, const Tensor& f) { sink(first, f.on_device() ? f.cpu() : f); };
  for (size_t i = 0; i < sched.size(); ++i)
    emit_chunk_frames(sched[i], chunk_tiles(plan, decoded, i),
                      i > 0 ? chunk_tiles(plan, decoded, i - 1) : std::vector<Tensor>{}, grid, next, to_host);
  H3_ASSERT(next == plan.time.out_frames, "video VAE stitch: {} frames streamed, plan says {}", next,
            plan.time.out_frames);
}

std::vector<Tensor> VideoVae::decode_units_on_device(const Tensor& zp, const std::vector<VideoDecodeUnit>& units,
                                                     int64_t max_batch) const {
  std::vector<Tensor> out;
  out.reserve(units.size());
  // The blocks' tokens are transposed on the host (decode_blocks): one download of the latents, not one per block.
  const Tensor zh = zp.on_device() ? zp.cpu() : zp;
  auto shape_of = [](const VideoDecodeUnit& u) { return std::tuple{u.t1 - u.t0, u.y1 - u.y0, u.x1 - u.x0}; };
  for (size_t i = 0; i < units.size();) {
    const auto [t, h, w] = shape_of(units[i]);
    const int64_t k = max_batch > 0 ? max_batch : batch_size(t, h, w);
    std::vector<Tensor> blocks;
    for (; i < units.size() && static_cast<int64_t>(blocks.size()) < k && shape_of(units[i]) == std::tuple{t, h, w};
         ++i) {
      const VideoDecodeUnit& u = units[i];
      blocks.push_back(vae::crop(zh, u.t0, u.t1, u.y0, u.y1, u.x0, u.x1));
    }
    for (Tensor& d : decode_blocks(blocks)) out.push_back(std::move(d));
  }
  return out;
}

void VideoVae::decode_streaming(const Tensor& z, const FrameSink& sink, int64_t max_batch) const {
  decode_streaming_on_device(
      z, [&](int64_t first, const Tensor& f) { sink(first, f.on_device() ? f.cpu() : f); }, max_batch);
}

void VideoVae::decode_streaming_on_device(const Tensor& z, const FrameSink& sink, int64_t max_batch) const {
  const VideoDecodePlan plan = plan_decode(z.shape());  // checks the latents' shape (pad_latents their dtype)
  const Tensor zp = pad_latents(z, plan);
  const auto sched = frame_schedule(plan, cfg_.token_drop > 0);
  const ops::StitchGrid grid = stitch_grid(plan);
  const size_t per_chunk = plan.rows.starts.size() * plan.cols.starts.size();
  std::vector<Tensor> prev, cur;
  int64_t next = 0;
  for (size_t i = 0; i < sched.size(); ++i) {
    const std::vector<VideoDecodeUnit> units(plan.units.begin() + i * per_chunk,
                                             plan.units.begin() + (i + 1) * per_chunk);
    {
      profile::Region r("vae.chunk_row_units");  // spans the regions of decode_blocks (not summed with them)
      cur = decode_units_on_device(zp, units, max_batch);
    }
    profile::Region r("vae.chunk_row_frames");  // spans vae.stitch and vae.download
    emit_chunk_frames(sched[i], cur, prev, grid, next, sink);
    prev = std::move(cur);
    cur.clear();
  }
  H3_ASSERT(next == plan.time.out_frames, "video VAE decode: {} frames streamed, plan says {}", next,
            plan.time.out_frames);
}

Tensor VideoVae::decode_into_clip(const Tensor& z) const {
  // Finished frames downloaded into their place in the one host clip.
  Tensor video;
  {
    profile::Region r("vae.clip_alloc");
    video = empty_clip(plan_decode(z.shape()), cfg_, ct_);
  }
  decode_streaming_on_device(z, [&](int64_t first, const Tensor& f) { place_frames(video, first, f); });
  return video;
}

}  // namespace h3

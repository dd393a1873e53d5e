#include "model/dit/layout.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace h3 {
namespace {

constexpr double kFrameRescale = 5.0 / 3.0;  // rotary units per pixel frame (40 units/s at 24 fps)
constexpr double kSpatialScale = 32.0;
constexpr int kFramesPerLatent[5] = {1, 4, 4, 4, 4};  // the VAE's 17 -> 5 grouping

double frame_span(int64_t k) {
  return kFrameRescale * kFramesPerLatent[k % 5];
}

// One spatial rotary axis, as numpy's linspace(left, left + ratio, d/2, endpoint=False) * 32 computes it.
std::vector<double> spatial_axis(int64_t dim, double sqrt_area) {
  const int64_t n = dim / kPatch;
  const double ratio = static_cast<double>(dim) / sqrt_area;
  const double left = (1.0 - ratio) / 2.0;
  const double step = ((left + ratio) - left) / static_cast<double>(n);
  std::vector<double> g(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k) {
    double y = static_cast<double>(k) * step;
    y += left;
    g[k] = y * kSpatialScale;
  }
  return g;
}

struct FrameGrid {
  std::vector<double> h, w;  // per axis
  int64_t rows() const { return static_cast<int64_t>(h.size() * w.size()); }
};

FrameGrid frame_grid(int64_t latent_h, int64_t latent_w, const char* what) {
  H3_CHECK(latent_h >= kPatch && latent_w >= kPatch && latent_h % kPatch == 0 && latent_w % kPatch == 0,
           "{}: latent grid {}x{} is not allowed; both sides must be positive and even (patch 2)", what, latent_h,
           latent_w);
  const double sqrt_area = std::sqrt(static_cast<double>(latent_h * latent_w));
  return {spatial_axis(latent_h, sqrt_area), spatial_axis(latent_w, sqrt_area)};
}

// numpy's pairwise summation of a contiguous f64 array (blocks of 8 partial sums up to 128 values, halves
// above). The "last" keyframe anchor is summed this way in the reference.
double pairwise_sum(const double* a, int64_t n) {
  if (n < 8) {
    double r = 0.0;
    for (int64_t i = 0; i < n; ++i) r += a[i];
    return r;
  }
  if (n <= 128) {
    double r[8];
    for (int j = 0; j < 8; ++j) r[j] = a[j];
    int64_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (int j = 0; j < 8; ++j) r[j] += a[i + j];
    double res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += a[i];
    return res;
  }
  int64_t half = n / 2;
  half -= half % 8;
  return pairwise_sum(a, half) + pairwise_sum(a + half, n - half);
}

double pairwise_clock_span(int64_t frames) {
  std::vector<double> spans(static_cast<size_t>(frames));
  for (int64_t k = 0; k < frames; ++k) spans[k] = frame_span(k);
  return pairwise_sum(spans.data(), frames);
}

// A video reference advances the clock by its frames summed left to right (a different order from the
// anchor).
double sequential_clock_span(int64_t frames) {
  double s = 0.0;
  for (int64_t k = 0; k < frames; ++k) s += frame_span(k);
  return s;
}

// Appends rows to a layout under construction, keeping every per-row array in step.
class LayoutWriter {
 public:
  LayoutWriter(PackedLayout& out, int64_t capacity) : out_(out) {
    out_.position_ids.reserve(static_cast<size_t>(capacity) * 3);
    out_.token_tags.reserve(static_cast<size_t>(capacity));
    out_.row_kind.reserve(static_cast<size_t>(capacity));
  }
  int64_t next() const { return static_cast<int64_t>(out_.token_tags.size()); }
  void row(double t, double h, double w, int64_t tag, RowKind kind) {
    out_.position_ids.insert(out_.position_ids.end(), {t, h, w});
    out_.token_tags.push_back(tag);
    out_.row_kind.push_back(kind);
  }
  void text(const std::vector<int64_t>& tags) {
    for (size_t i = 0; i < tags.size(); ++i) {
      H3_CHECK(tags[i] == kTagText || tags[i] == kTagVideo,
               "text row {} has tag {}; text rows must be tagged 1 (text) or 0 (vision block)", i, tags[i]);
      row(static_cast<double>(i), 0.0, 0.0, tags[i], tags[i] == kTagText ? RowKind::text : RowKind::text_vision);
      out_.text_indices.push_back(static_cast<int64_t>(i));
    }
  }
  // Both channels of `latents` audio latents from `origin`, pinned to the extremes of `width_axis`.
  void audio(int64_t latents, double origin, const std::vector<double>& width_axis, RowKind kind) {
    for (int64_t c = 0; c < kAudioChannels; ++c) {
      const double w = c == 0 ? width_axis.front() : width_axis.back();
      for (int64_t a = 0; a < latents; ++a) {
        out_.audio_indices.push_back(next());
        row(origin + static_cast<double>(a), 0.0, w, kTagAudio, kind);
      }
    }
  }
  // One latent frame of video rows at rotary time t.
  void frame(double t, const FrameGrid& g, RowKind kind) {
    for (double h : g.h)
      for (double w : g.w) {
        out_.video_indices.push_back(next());
        row(t, h, w, kTagVideo, kind);
      }
  }
  // `frames` latent frames from `origin`; the clock is a running sum added to the origin, as torch's cumsum.
  void video(int64_t frames, double origin, const FrameGrid& g, RowKind kind) {
    double clock = 0.0;
    for (int64_t f = 0; f < frames; ++f) {
      if (f > 0) clock += frame_span(f - 1);
      frame(origin + clock, g, kind);
    }
  }
  void finish() {
    out_.seq_len = next();
    out_.num_text = static_cast<int64_t>(out_.text_indices.size());
  }

 private:
  PackedLayout& out_;
};

// The target's frame grid, once its sizes are checked.
FrameGrid target_grid(const TargetGrid& t) {
  H3_CHECK(t.latent_frames >= 1, "target has {} latent frames; at least 1 is needed", t.latent_frames);
  H3_CHECK(t.audio_latents >= 1, "target has {} audio latents per channel; at least 1 is needed", t.audio_latents);
  return frame_grid(t.latent_h, t.latent_w, "target video");
}

}  // namespace

Tensor PackedLayout::position_tensor() const {
  return Tensor::from(position_ids, {seq_len, 3});
}

std::vector<int64_t> text_tags_with_vision(int64_t num_text,
                                           const std::vector<std::pair<int64_t, int64_t>>& vision_ranges) {
  H3_CHECK(num_text >= 0, "text length must not be negative, got {}", num_text);
  std::vector<int64_t> tags(static_cast<size_t>(num_text), kTagText);
  for (auto [begin, end] : vision_ranges) {
    H3_CHECK(0 <= begin && begin < end && end <= num_text, "vision rows [{}, {}) do not lie inside the {} text rows",
             begin, end, num_text);
    std::fill(tags.begin() + begin, tags.begin() + end, kTagVideo);
  }
  return tags;
}

PackedLayout build_fl2va_layout(const std::vector<int64_t>& text_tags, const TargetGrid& target,
                                const std::vector<KeyframeAnchor>& keyframes) {
  const FrameGrid grid = target_grid(target);
  const int64_t L = static_cast<int64_t>(text_tags.size());
  const auto K = static_cast<int64_t>(keyframes.size());
  PackedLayout out;
  out.target = target;
  LayoutWriter w(out, L + (K + target.latent_frames) * grid.rows() + kAudioChannels * target.audio_latents);
  w.text(text_tags);
  const double origin = static_cast<double>(L);
  for (KeyframeAnchor k : keyframes) {
    double anchor = origin;
    if (k == KeyframeAnchor::last) anchor = origin + pairwise_clock_span(target.latent_frames) - kFrameRescale;
    w.frame(anchor, grid, RowKind::cond_video);
  }
  out.num_condition_video_rows = K * grid.rows();
  w.audio(target.audio_latents, origin, grid.w, RowKind::target_audio);
  w.video(target.latent_frames, origin, grid, RowKind::target_video);
  w.finish();
  return out;
}

PackedLayout build_ref2va_layout(const std::vector<int64_t>& text_tags, const TargetGrid& target,
                                 const std::vector<Reference>& references) {
  const FrameGrid grid = target_grid(target);
  const int64_t L = static_cast<int64_t>(text_tags.size());
  PackedLayout out;
  out.target = target;
  LayoutWriter w(out, L + target.latent_frames * grid.rows() + kAudioChannels * target.audio_latents);
  w.text(text_tags);
  double clock = static_cast<double>(L);
  for (size_t i = 0; i < references.size(); ++i) {
    const Reference& r = references[i];
    switch (r.kind) {
      case Reference::Kind::image: {
        H3_CHECK(r.latent_frames == 1, "reference {} is an image with {} latent frames; images have exactly 1", i,
                 r.latent_frames);
        w.frame(clock, frame_grid(r.latent_h, r.latent_w, "image reference"), RowKind::cond_video);
        clock += 1.0;  // an image takes one integer rotary slot, not a latent frame's 5/3
        break;
      }
      case Reference::Kind::audio: {
        H3_CHECK(r.audio_latents >= 1, "reference {} is audio with {} latents; at least 1 is needed", i,
                 r.audio_latents);
        w.audio(r.audio_latents, clock, grid.w, RowKind::ref_audio);
        clock += static_cast<double>(r.audio_latents);
        break;
      }
      case Reference::Kind::video: {
        H3_CHECK(r.latent_frames >= 1 && r.audio_latents >= 0,
                 "reference {} is a video with {} latent frames and {} soundtrack latents; needs >= 1 frame", i,
                 r.latent_frames, r.audio_latents);
        const FrameGrid g = frame_grid(r.latent_h, r.latent_w, "video reference");
        if (r.audio_latents > 0) w.audio(r.audio_latents, clock, g.w, RowKind::ref_audio);
        w.video(r.latent_frames, clock, g, RowKind::cond_video);
        clock += std::max(static_cast<double>(r.audio_latents), sequential_clock_span(r.latent_frames));
        break;
      }
    }
  }
  out.num_condition_video_rows = static_cast<int64_t>(out.video_indices.size());
  out.num_condition_audio_rows = static_cast<int64_t>(out.audio_indices.size());
  w.audio(target.audio_latents, clock, grid.w, RowKind::target_audio);
  w.video(target.latent_frames, clock, grid, RowKind::target_video);
  w.finish();
  return out;
}

RowTimesteps plan_row_timesteps(const PackedLayout& layout, float t_video, float t_audio) {
  // The reference takes max() on Python floats and stores the result in an f32 tensor.
  const float t_cond = static_cast<float>(std::max(static_cast<double>(t_video), kConditionNoiseAug));
  auto value_of = [&](RowKind k) {
    switch (k) {
      case RowKind::cond_video:
        return t_cond;
      case RowKind::ref_audio:
        return 1.0f;
      case RowKind::target_audio:
        return t_audio;
      default:
        return t_video;
    }
  };
  RowTimesteps out;
  for (RowKind k : {RowKind::text, RowKind::text_vision, RowKind::cond_video, RowKind::ref_audio, RowKind::target_audio,
                    RowKind::target_video}) {
    if (std::find(layout.row_kind.begin(), layout.row_kind.end(), k) == layout.row_kind.end()) continue;
    float v = value_of(k);
    if (std::find(out.timestep.begin(), out.timestep.end(), v) == out.timestep.end()) out.timestep.push_back(v);
  }
  std::sort(out.timestep.begin(), out.timestep.end());
  int64_t index_of[6];
  for (int k = 0; k < 6; ++k) {
    float v = value_of(static_cast<RowKind>(k));
    auto it = std::find(out.timestep.begin(), out.timestep.end(), v);
    index_of[k] = it == out.timestep.end() ? -1 : static_cast<int64_t>(it - out.timestep.begin());
  }
  out.timestep_indices.resize(layout.row_kind.size());
  for (size_t i = 0; i < layout.row_kind.size(); ++i)
    out.timestep_indices[i] = index_of[static_cast<int>(layout.row_kind[i])];
  return out;
}

// ---- patchify
// ----------------------------------------------------------------------------------------------

namespace {

// Copies element by element in the dtype's byte size, so every dtype goes through the same index map.
void copy_elem(const Tensor& src, int64_t si, Tensor& dst, int64_t di) {
  const size_t n = dtype_size(src.dtype());
  std::memcpy(static_cast<std::byte*>(dst.raw()) + di * n, static_cast<const std::byte*>(src.raw()) + si * n, n);
}

void check_host(const Tensor& t, const char* what) {
  H3_CHECK(t.device() == Device::cpu, "{}: expected a host tensor, got one on the device", what);
}

}  // namespace

Tensor patchify_video(const Tensor& latents) {
  check_host(latents, "patchify_video");
  Shape s = latents.shape();
  if (s.size() == 5) {
    H3_CHECK(s[0] == 1, "patchify_video: batch {} is not supported; pass one [C, T, H, W] latent", s[0]);
    s.erase(s.begin());
  }
  H3_CHECK(s.size() == 4, "patchify_video: expected [C, T, H, W] latents, got {}", latents.describe());
  const int64_t C = s[0], T = s[1], H = s[2], W = s[3];
  H3_CHECK(H % kPatch == 0 && W % kPatch == 0, "patchify_video: latent size {}x{} must be even on both sides", H, W);
  const int64_t hp = H / kPatch, wp = W / kPatch;
  Tensor rows(latents.dtype(), {T * hp * wp, C * kPatch * kPatch});
  for (int64_t f = 0; f < T; ++f)
    for (int64_t y = 0; y < hp; ++y)
      for (int64_t x = 0; x < wp; ++x) {
        const int64_t row = (f * hp + y) * wp + x;
        for (int64_t c = 0; c < C; ++c)
          for (int64_t py = 0; py < kPatch; ++py)
            for (int64_t px = 0; px < kPatch; ++px) {
              const int64_t src = ((c * T + f) * H + (y * kPatch + py)) * W + (x * kPatch + px);
              copy_elem(latents, src, rows, row * C * 4 + c * 4 + py * 2 + px);
            }
      }
  return rows;
}

Tensor unpatchify_video(const Tensor& rows, int64_t channels, int64_t frames, int64_t height, int64_t width) {
  check_host(rows, "unpatchify_video");
  H3_CHECK(height % kPatch == 0 && width % kPatch == 0, "unpatchify_video: latent size {}x{} must be even", height,
           width);
  const int64_t hp = height / kPatch, wp = width / kPatch;
  H3_CHECK(rows.ndim() == 2 && rows.dim(0) == frames * hp * wp && rows.dim(1) == channels * 4,
           "unpatchify_video: rows {} do not match [C={}, T={}, H={}, W={}] (want [{}, {}])", rows.describe(), channels,
           frames, height, width, frames * hp * wp, channels * 4);
  Tensor out(rows.dtype(), {channels, frames, height, width});
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t h = 0; h < height; ++h)
        for (int64_t w = 0; w < width; ++w) {
          const int64_t row = (f * hp + h / kPatch) * wp + w / kPatch;
          const int64_t feat = c * 4 + (h % kPatch) * 2 + (w % kPatch);
          copy_elem(rows, row * channels * 4 + feat, out, ((c * frames + f) * height + h) * width + w);
        }
  return out;
}

Tensor pack_audio(const Tensor& latents) {
  check_host(latents, "pack_audio");
  H3_CHECK(latents.ndim() == 3 && latents.dim(0) == kAudioChannels,
           "pack_audio: expected stereo latents [2, C, A], got {}", latents.describe());
  const int64_t C = latents.dim(1), A = latents.dim(2);
  Tensor rows(latents.dtype(), {kAudioChannels * A, C});
  for (int64_t ch = 0; ch < kAudioChannels; ++ch)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t a = 0; a < A; ++a) copy_elem(latents, (ch * C + c) * A + a, rows, (ch * A + a) * C + c);
  return rows;
}

Tensor unpack_audio(const Tensor& rows, int64_t audio_latents) {
  check_host(rows, "unpack_audio");
  H3_CHECK(rows.ndim() == 2 && rows.dim(0) == kAudioChannels * audio_latents,
           "unpack_audio: rows {} do not hold 2 x {} audio latents", rows.describe(), audio_latents);
  const int64_t C = rows.dim(1), A = audio_latents;
  Tensor out(rows.dtype(), {kAudioChannels, C, A});
  for (int64_t ch = 0; ch < kAudioChannels; ++ch)
    for (int64_t a = 0; a < A; ++a)
      for (int64_t c = 0; c < C; ++c) copy_elem(rows, (ch * A + a) * C + c, out, (ch * C + c) * A + a);
  return out;
}

}  // namespace h3

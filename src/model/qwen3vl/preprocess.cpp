// Qwen2-VL-style preprocessing, Qwen3-VL mRoPE positions and H3's labelled prompt (see model/qwen3vl/preprocess.h).
#include "model/qwen3vl/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "core/error.h"

namespace h3 {

namespace {

// PIL's bicubic kernel (a = -0.5).
double bicubic(double x) {
  constexpr double a = -0.5;
  x = std::fabs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

struct Taps {
  std::vector<int64_t> first, count;
  std::vector<std::vector<int32_t>> k;  // fixed point, 22 fractional bits
};

constexpr int kPrecisionBits = 32 - 8 - 2;

// PIL's precompute_coeffs + normalize_coeffs_8bpc for one axis.
Taps taps_for(int64_t in, int64_t out) {
  const double scale = static_cast<double>(in) / static_cast<double>(out);
  const double filter_scale = std::max(scale, 1.0);
  const double support = 2.0 * filter_scale;
  Taps t;
  for (int64_t i = 0; i < out; ++i) {
    const double center = (static_cast<double>(i) + 0.5) * scale;
    const double ss = 1.0 / filter_scale;
    auto xmin = static_cast<int64_t>(center - support + 0.5);
    if (xmin < 0) xmin = 0;
    auto xmax = static_cast<int64_t>(center + support + 0.5);
    if (xmax > in) xmax = in;
    xmax -= xmin;
    std::vector<double> w(static_cast<size_t>(xmax));
    double total = 0;
    for (int64_t x = 0; x < xmax; ++x) {
      w[x] = bicubic((static_cast<double>(x + xmin) - center + 0.5) * ss);
      total += w[x];
    }
    std::vector<int32_t> k(static_cast<size_t>(xmax));
    for (int64_t x = 0; x < xmax; ++x) {
      const double v = total != 0.0 ? w[x] / total : 0.0;
      k[x] = static_cast<int32_t>(v < 0 ? -0.5 + v * (1 << kPrecisionBits) : 0.5 + v * (1 << kPrecisionBits));
    }
    t.first.push_back(xmin);
    t.count.push_back(xmax);
    t.k.push_back(std::move(k));
  }
  return t;
}

uint8_t clip8(int64_t acc) {
  const int64_t v = acc >> kPrecisionBits;
  return static_cast<uint8_t>(std::clamp<int64_t>(v, 0, 255));
}

// One pass over axis `axis` (1 = width, 0 = height) of a u8 [H, W, C] image.
Tensor resample_axis(const Tensor& img, int64_t out_size, int axis) {
  const int64_t H = img.dim(0), W = img.dim(1), C = img.dim(2);
  const int64_t in = axis == 1 ? W : H;
  const Taps t = taps_for(in, out_size);
  const int64_t oh = axis == 1 ? H : out_size, ow = axis == 1 ? out_size : W;
  Tensor out(DType::u8, {oh, ow, C});
  const uint8_t* src = img.data<uint8_t>();
  uint8_t* dst = out.data<uint8_t>();
  for (int64_t y = 0; y < oh; ++y)
    for (int64_t x = 0; x < ow; ++x) {
      const int64_t i = axis == 1 ? x : y;
      for (int64_t c = 0; c < C; ++c) {
        int64_t acc = int64_t{1} << (kPrecisionBits - 1);
        for (int64_t j = 0; j < t.count[i]; ++j) {
          const int64_t s = t.first[i] + j;
          const uint8_t v = axis == 1 ? src[(y * W + s) * C + c] : src[(s * W + x) * C + c];
          acc += static_cast<int64_t>(v) * t.k[i][j];
        }
        dst[(y * ow + x) * C + c] = clip8(acc);
      }
    }
  return out;
}

// Python's round() on a double: half to even.
int64_t round_half_even(double v) {
  return static_cast<int64_t>(std::nearbyint(v));
}

}  // namespace

VlPreprocessConfig VlPreprocessConfig::video_defaults() {
  VlPreprocessConfig c;
  c.min_pixels = 4096;
  c.max_pixels = 25165824;
  return c;
}

std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                         int64_t max_pixels) {
  if (height < 10 || width < 10)
    fail("image {}x{}: both sides must be at least 10 pixels for the Qwen vision processor", height, width);
  const double h = static_cast<double>(height), w = static_cast<double>(width), f = static_cast<double>(factor);
  if (std::max(h, w) / std::min(h, w) > 200)
    fail("image {}x{}: aspect ratio above 200 is refused by the Qwen vision processor", height, width);
  int64_t h_bar = round_half_even(h / f) * factor;
  int64_t w_bar = round_half_even(w / f) * factor;
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(h * w / static_cast<double>(max_pixels));
    h_bar = std::max(factor, static_cast<int64_t>(std::floor(h / beta / f)) * factor);
    w_bar = std::max(factor, static_cast<int64_t>(std::floor(w / beta / f)) * factor);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (h * w));
    h_bar = static_cast<int64_t>(std::ceil(h * beta / f)) * factor;
    w_bar = static_cast<int64_t>(std::ceil(w * beta / f)) * factor;
  }
  return {h_bar, w_bar};
}

Tensor resize_bicubic_u8(const Tensor& image, int64_t out_h, int64_t out_w) {
  if (image.dtype() != DType::u8 || image.ndim() != 3)
    fail("resize_bicubic_u8: expected a u8 [H, W, C] image, got {}", image.describe());
  if (out_h < 1 || out_w < 1) fail("resize_bicubic_u8: output size {}x{} is empty", out_h, out_w);
  Tensor x = image;
  if (out_w != image.dim(1)) x = resample_axis(x, out_w, 1);
  if (out_h != image.dim(0)) x = resample_axis(x, out_h, 0);
  return x.raw() == image.raw() ? image.clone() : x;
}

VlPixels patchify_frames(const Tensor& frames, const VlPreprocessConfig& cfg) {
  if (frames.ndim() != 4 || frames.dtype() != DType::f64)
    fail("patchify_frames: expected f64 [F, H, W, C], got {}", frames.describe());
  const int64_t F = frames.dim(0), H = frames.dim(1), W = frames.dim(2), C = frames.dim(3);
  const int64_t p = cfg.patch, tp = cfg.temporal_patch, m = cfg.merge;
  if (F < 1 || H % (p * m) || W % (p * m))
    fail("patchify_frames: {} frames of {}x{}: need at least one frame with sides multiples of {}", F, H, W, p * m);
  const int64_t t = (F + tp - 1) / tp, h = H / p, w = W / p;
  VlPixels out;
  out.grid = {t, h, w};
  out.pixels = Tensor(DType::f64, {t * h * w, C * tp * p * p});
  const double* src = frames.data<double>();
  double* dst = out.pixels.data<double>();
  int64_t row = 0;
  for (int64_t ti = 0; ti < t; ++ti)
    for (int64_t bh = 0; bh < h / m; ++bh)
      for (int64_t bw = 0; bw < w / m; ++bw)
        for (int64_t mh = 0; mh < m; ++mh)
          for (int64_t mw = 0; mw < m; ++mw, ++row) {
            double* o = dst + row * C * tp * p * p;
            for (int64_t c = 0; c < C; ++c)
              for (int64_t dt = 0; dt < tp; ++dt) {
                const int64_t fi = std::min(ti * tp + dt, F - 1);  // pad by repeating the last frame
                for (int64_t y = 0; y < p; ++y)
                  for (int64_t x = 0; x < p; ++x) {
                    const int64_t yy = (bh * m + mh) * p + y, xx = (bw * m + mw) * p + x;
                    o[((c * tp + dt) * p + y) * p + x] = src[((fi * H + yy) * W + xx) * C + c];
                  }
              }
          }
  return out;
}

VlPixels preprocess_frames(const std::vector<Tensor>& frames, const VlPreprocessConfig& cfg) {
  if (frames.empty()) fail("Qwen vision preprocessing: no frames");
  const int64_t H = frames[0].dim(0), W = frames[0].dim(1);
  for (size_t i = 0; i < frames.size(); ++i)
    if (frames[i].dtype() != DType::u8 || frames[i].ndim() != 3 || frames[i].dim(2) != 3 || frames[i].dim(0) != H ||
        frames[i].dim(1) != W)
      fail("Qwen vision preprocessing: frame {} is {}, expected u8[{}, {}, 3] like frame 0", i, frames[i].describe(), H,
           W);
  const auto [rh, rw] = smart_resize(H, W, cfg.factor(), cfg.min_pixels, cfg.max_pixels);
  const auto F = static_cast<int64_t>(frames.size());
  Tensor normed(DType::f64, {F, rh, rw, 3});
  double* o = normed.data<double>();
  for (int64_t f = 0; f < F; ++f) {
    const Tensor r = (rh == H && rw == W) ? frames[f] : resize_bicubic_u8(frames[f], rh, rw);
    const uint8_t* s = r.data<uint8_t>();
    for (int64_t i = 0; i < rh * rw; ++i)
      for (int64_t c = 0; c < 3; ++c)
        o[(f * rh * rw + i) * 3 + c] = (s[i * 3 + c] * (1.0 / 255.0) - cfg.mean[c]) / cfg.std[c];
  }
  return patchify_frames(normed, cfg);
}

std::vector<int64_t> sample_frame_indices(int64_t n_frames, double fps, double target_fps) {
  if (fps <= 0 || target_fps <= 0) fail("video frame sampling: fps {} / target {} must be positive", fps, target_fps);
  std::vector<int64_t> out;
  for (int64_t k = 0;; ++k) {
    const int64_t idx = static_cast<int64_t>(std::llround(static_cast<double>(k) * fps / target_fps));
    if (idx >= n_frames) break;
    if (out.empty() || out.back() != idx) out.push_back(idx);
  }
  return out;
}

std::vector<double> temporal_patch_timestamps(std::vector<int64_t> indices, double fps, int64_t temporal_patch) {
  if (indices.empty()) return {};
  while (static_cast<int64_t>(indices.size()) % temporal_patch) indices.push_back(indices.back());
  std::vector<double> out;
  for (size_t i = 0; i < indices.size(); i += static_cast<size_t>(temporal_patch)) {
    const double a = static_cast<double>(indices[i]) / fps;
    const double b = static_cast<double>(indices[i + temporal_patch - 1]) / fps;
    out.push_back((a + b) / 2);
  }
  return out;
}

std::string timestamp_text(double seconds) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "<%.1f seconds>", seconds);
  return buf;
}

std::vector<int64_t> qwen3vl_rope_index(const std::vector<int32_t>& ids, const std::vector<GridThw>& image_grids,
                                        const std::vector<GridThw>& video_grids, int64_t merge,
                                        const VisionTokenIds& tok) {
  std::vector<std::pair<int64_t, int64_t>> frames;  // merged (h, w) of every video frame, in order
  for (const auto& g : video_grids)
    for (int64_t t = 0; t < g[0]; ++t) frames.emplace_back(g[1] / merge, g[2] / merge);
  const auto n = static_cast<int64_t>(ids.size());
  std::vector<int64_t> pos(static_cast<size_t>(3 * n));
  size_t next_image = 0, next_frame = 0;
  int64_t next = 0;
  for (int64_t i = 0; i < n;) {
    const bool image = ids[i] == tok.image, video = ids[i] == tok.video;
    if (!image && !video) {
      pos[i] = pos[n + i] = pos[2 * n + i] = next++;
      ++i;
      continue;
    }
    int64_t gh = 0, gw = 0;
    if (image) {
      if (next_image >= image_grids.size())
        fail("mRoPE positions: image placeholder at token {} but only {} image grid(s)", i, image_grids.size());
      const GridThw& g = image_grids[next_image++];
      if (g[0] != 1) fail("mRoPE positions: image grid t = {} (images have t = 1)", g[0]);
      gh = g[1] / merge;
      gw = g[2] / merge;
    } else {
      if (next_frame >= frames.size())
        fail("mRoPE positions: video placeholder at token {} but only {} video frame(s) in the grids", i,
             frames.size());
      std::tie(gh, gw) = frames[next_frame++];
    }
    if (i + gh * gw > n) fail("mRoPE positions: a {}x{} vision block at token {} runs past the prompt end", gh, gw, i);
    for (int64_t r = 0; r < gh; ++r)
      for (int64_t c = 0; c < gw; ++c, ++i) {
        if (ids[i] != (image ? tok.image : tok.video))
          fail("mRoPE positions: token {} should continue the {}x{} vision block", i, gh, gw);
        pos[i] = next;
        pos[n + i] = next + r;
        pos[2 * n + i] = next + c;
      }
    next += std::max(gh, gw);
  }
  if (next_image != image_grids.size() || next_frame != frames.size())
    fail("mRoPE positions: the prompt has {} image and {} video-frame blocks, the grids {} and {}", next_image,
         next_frame, image_grids.size(), frames.size());
  return pos;
}

std::string h3_prompt_text(const std::vector<PromptMedia>& media, const std::string& prompt, int64_t merge) {
  std::string s;
  int n_picture = 0, n_audio = 0, n_video = 0;
  auto block = [&](const char* pad, int64_t tokens) {
    s += "<|vision_start|>";
    for (int64_t i = 0; i < tokens; ++i) s += pad;
    s += "<|vision_end|>";
  };
  for (const auto& m : media) {
    switch (m.kind) {
      case PromptMedia::Kind::image:
        s += "<Picture " + std::to_string(++n_picture) + ">: ";
        block("<|image_pad|>", m.grid[0] * m.grid[1] * m.grid[2] / (merge * merge));
        break;
      case PromptMedia::Kind::audio:
        s += "<Audio " + std::to_string(++n_audio) + ">: ";
        break;
      case PromptMedia::Kind::video:
        if (m.video_has_audio) s += "<Audio " + std::to_string(++n_audio) + ">: ";
        s += "<Video " + std::to_string(++n_video) + ">: ";
        if (static_cast<int64_t>(m.timestamps.size()) != m.grid[0])
          fail("H3 prompt: video {} has {} temporal patches but {} timestamps", n_video, m.grid[0],
               m.timestamps.size());
        for (double t : m.timestamps) {
          s += timestamp_text(t);
          block("<|video_pad|>", m.grid[1] * m.grid[2] / (merge * merge));
        }
        break;
    }
  }
  return s + prompt;
}

}  // namespace h3

// Keyframes and references (pipeline/conditions.h).
#include "pipeline/conditions.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/log.h"
#include "media/media_read.h"
#include "model/qwen3vl/qwen3vl.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/tokenizer.h"
#include "pipeline/generator.h"
#include "pipeline/geometry.h"
#include "pipeline/noise.h"

namespace h3 {

namespace {

// Condition k's augmentation noise comes from this stream of the request seed (0: video noise, 1: audio).
constexpr uint64_t kConditionNoiseStream = 2;

int64_t round_to_multiple(double v, int64_t m) {
  return std::max<int64_t>(m, static_cast<int64_t>(std::nearbyint(v / static_cast<double>(m))) * m);
}

// Short edge `s`, area at most `max_pixels`, sides rounded to multiples of m (the 768 rule with other sizes).
std::pair<int64_t, int64_t> canvas_of(int64_t w, int64_t h, int64_t s, int64_t max_pixels, int64_t m) {
  const double r = static_cast<double>(w) / static_cast<double>(h);
  double cw = r >= 1 ? static_cast<double>(s) * r : static_cast<double>(s);
  double ch = r >= 1 ? static_cast<double>(s) : static_cast<double>(s) / r;
  if (cw * ch > static_cast<double>(max_pixels)) {
    const double k = std::sqrt(static_cast<double>(max_pixels) / (cw * ch));
    cw *= k;
    ch *= k;
  }
  return {round_to_multiple(cw, m), round_to_multiple(ch, m)};
}

void check_aspect(const MediaInfo& info, const std::string& what) {
  const double r = static_cast<double>(info.width) / static_cast<double>(info.height);
  H3_CHECK(info.width > 0 && info.height > 0 && r >= 0.25 && r <= 4.0,
           "{} {} is {}x{}; its aspect must lie in 1:4 .. 4:1", what, info.path, info.width, info.height);
}

// scan_media (or the caller's scanner) with the condition named in its errors ("reference 2 (video): ...").
// A scan reads no more than the longest request can use: max_frames + 1 frames (one more tells a video from a
// still), as many audio samples as max_frames last.
MediaInfo scan_as(const std::string& path, const std::string& what, const ModelLimits& lim, const MediaScanner& scan) {
  const int64_t frames = lim.max_frames + 1;
  const int64_t samples = lim.max_frames * lim.audio_sample_rate / kFps + lim.audio_hop;
  try {
    return scan ? scan(path, frames, samples)
                : scan_media(path, static_cast<int>(kFps), lim.audio_sample_rate, frames, samples);
  } catch (const Error& e) {
    fail("{}: {}", what, e.what());
  }
}

MediaInfo scan_picture(const std::string& path, const std::string& what, const ModelLimits& lim,
                       const MediaScanner& scan) {
  const MediaInfo info = scan_as(path, what, lim, scan);
  H3_CHECK(info.has_video, "{} {} holds no picture (give a PNG, JPEG or WebP image)", what, path);
  H3_CHECK(info.still, "{} {} is a video of {} frames; give a single picture (PNG, JPEG or WebP)", what, path,
           info.frames);
  check_aspect(info, what);
  return info;
}

int64_t target_samples(const ResolvedRequest& r, const ModelLimits& lim) {
  return r.frames * lim.audio_sample_rate / kFps;  // the generated duration, floor
}

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

std::vector<int64_t> shape_of(const ConditionMedia& m, int64_t channels) {
  return {channels, m.latent_frames, m.latent_h, m.latent_w};
}

Tensor concat_rows(const std::vector<Tensor>& parts, int64_t width) {
  int64_t n = 0;
  for (const Tensor& t : parts) n += t.dim(0);
  Tensor out(DType::f32, {n, width});
  auto* o = static_cast<std::byte*>(out.raw());
  for (const Tensor& t : parts) {
    H3_ASSERT(t.dtype() == DType::f32 && t.ndim() == 2 && t.dim(1) == width, "condition rows {}", t.describe());
    std::memcpy(o, t.raw(), t.nbytes());
    o += t.nbytes();
  }
  return out;
}

// [3, F, H, W] RGB in [0, 1] -> (x - imagenet_mean) / imagenet_std.
Tensor imagenet_normalize(const Tensor& rgb01) {
  static const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
  Tensor out = rgb01.to(DType::f32);
  float* p = out.data<float>();
  const int64_t plane = out.numel() / 3;
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < plane; ++i)
      p[c * plane + i] = static_cast<float>((static_cast<double>(p[c * plane + i]) - mean[c]) / stdv[c]);
  return out;
}

}  // namespace

std::string condition_aspect(const GenerateRequest& req, const ModelLimits& lim, const MediaScanner& scan) {
  const std::string& kf = !req.first_image.empty() ? req.first_image : req.last_image;
  if (kf.empty() || !req.references.empty()) return "";
  const MediaInfo info =
      scan_picture(kf, req.first_image.empty() ? "the last keyframe" : "the first keyframe", lim, scan);
  return fmt::format("{}:{}", info.width, info.height);
}

void resolve_conditions(const GenerateRequest& req, ResolvedRequest& r, const ModelLimits& lim,
                        const MediaScanner& scan) {
  const bool keyframes = !req.first_image.empty() || !req.last_image.empty();
  H3_CHECK(!(keyframes && !req.references.empty()),
           "keyframes (first/last image) and references cannot be combined: fl2va and ref2va are different "
           "models; give one or the other");
  r.media.clear();
  r.mode = keyframes ? "fl2va" : req.references.empty() ? "t2va" : "ref2va";
  if (keyframes) {
    for (const auto& [role, path] : {std::pair<std::string, std::string>{"first", req.first_image},
                                     std::pair<std::string, std::string>{"last", req.last_image}}) {
      if (path.empty()) continue;
      scan_picture(path, "the " + role + " keyframe", lim, scan);
      ConditionMedia m;
      m.role = role;
      m.path = path;
      m.width = r.width;
      m.height = r.height;
      m.frames = 1;
      m.latent_frames = 1;
      m.latent_h = r.latent_h;
      m.latent_w = r.latent_w;
      r.media.push_back(std::move(m));
    }
    return;
  }
  if (req.references.empty()) return;  // t2va
  const int64_t n = static_cast<int64_t>(req.references.size());
  H3_CHECK(n <= lim.max_references, "{} references given; at most {} are allowed", n, lim.max_references);
  const int64_t ratio = lim.vae_spatial_ratio, mult = lim.canvas_multiple;
  const int64_t max_samples = target_samples(r, lim);
  int counts[3] = {0, 0, 0};
  for (int64_t i = 0; i < n; ++i) {
    const auto& ref = req.references[static_cast<size_t>(i)];
    const std::string what = fmt::format("reference {} ({})", i + 1, ref.kind);
    H3_CHECK(ref.kind == "image" || ref.kind == "video" || ref.kind == "audio",
             "reference {} has kind \"{}\"; allowed: image, video, audio", i + 1, ref.kind);
    H3_CHECK(!ref.path.empty(), "{}: no file given", what);
    ConditionMedia m;
    m.role = ref.kind;
    m.path = ref.path;
    if (ref.kind == "image") {
      const MediaInfo info = scan_picture(ref.path, what, lim, scan);
      ++counts[0];
      // Short edge to ref_image_short_edge (rounded to the canvas multiple), either way, no area cap.
      const double s =
          static_cast<double>(lim.ref_image_short_edge) / static_cast<double>(std::min(info.width, info.height));
      m.width = round_to_multiple(static_cast<double>(info.width) * s, mult);
      m.height = round_to_multiple(static_cast<double>(info.height) * s, mult);
      m.frames = 1;
      m.latent_frames = 1;
    } else if (ref.kind == "video") {
      const MediaInfo info = scan_as(ref.path, what, lim, scan);
      for (const auto& w : info.warnings) r.notes.push_back(fmt::format("{}: damaged data ({})", what, w));
      H3_CHECK(info.has_video, "{} {} holds no pictures; give a video file (or use kind audio)", what, ref.path);
      H3_CHECK(!info.still, "{} {} is a single picture; give it as an image reference", what, ref.path);
      check_aspect(info, what);
      ++counts[1];
      const int64_t avail = std::min(info.frames, r.frames);
      H3_CHECK(avail >= 5, "{} {} has {} frames at 24 fps; at least 5 are needed", what, ref.path, info.frames);
      m.frames = (avail - 5) / kFramesPerChunk * kFramesPerChunk + 5;  // snapped down to 17n+5
      if (m.frames != info.frames)
        r.notes.push_back(fmt::format("{}: {}{} frames at 24 fps, {} used (17n+5, at most the target's {})", what,
                                      info.truncated ? "at least " : "", info.frames, m.frames, r.frames));
      const auto [w, h] = canvas_of(info.width, info.height, lim.ref_video_short_edge, lim.ref_video_max_pixels, mult);
      m.width = w;
      m.height = h;
      m.latent_frames = video_latent_frames(m.frames);
      if (info.has_audio) {
        m.audio_samples = std::min(info.audio_samples, max_samples);
        m.audio_latents = ceil_div(m.audio_samples, lim.audio_hop);
      }
    } else {
      const MediaInfo info = scan_as(ref.path, what, lim, scan);
      for (const auto& w : info.warnings) r.notes.push_back(fmt::format("{}: damaged data ({})", what, w));
      H3_CHECK(info.has_audio, "{} {} holds no sound; give an audio file (WAV, FLAC, MP3, AAC, ...)", what, ref.path);
      ++counts[2];
      m.audio_samples = std::min(info.audio_samples, max_samples);
      m.audio_latents = ceil_div(m.audio_samples, lim.audio_hop);
    }
    if (m.visual()) {
      m.latent_h = m.height / ratio;
      m.latent_w = m.width / ratio;
    }
    r.media.push_back(std::move(m));
  }
  r.notes.push_back(fmt::format("ref2va: {} image, {} video, {} audio reference(s)", counts[0], counts[1], counts[2]));
}

PackedLayout request_layout(const ResolvedRequest& r, const std::vector<int64_t>& text_tags) {
  const TargetGrid grid{r.latent_frames, r.latent_h, r.latent_w, r.audio_latents};
  if (r.mode == "ref2va") {
    std::vector<Reference> refs;
    for (const ConditionMedia& m : r.media) {
      Reference ref;
      ref.kind = m.role == "image"   ? Reference::Kind::image
                 : m.role == "video" ? Reference::Kind::video
                                     : Reference::Kind::audio;
      ref.latent_frames = m.latent_frames;
      ref.latent_h = m.latent_h;
      ref.latent_w = m.latent_w;
      ref.audio_latents = m.audio_latents;
      refs.push_back(ref);
    }
    return build_ref2va_layout(text_tags, grid, refs);
  }
  std::vector<KeyframeAnchor> anchors;
  for (const ConditionMedia& m : r.media) {
    H3_CHECK(m.role == "first" || m.role == "last", "{} request with a \"{}\" condition", r.mode, m.role);
    anchors.push_back(m.role == "first" ? KeyframeAnchor::first : KeyframeAnchor::last);
  }
  return build_fl2va_layout(text_tags, grid, anchors);
}

ConditionRows encode_conditions(const ResolvedRequest& r, const VideoVae& vvae, const AudioVae& avae) {
  const int64_t C = vvae.config().latent_channels, Ca = avae.config().latent_channels;
  const int sample_rate = static_cast<int>(avae.config().sampling_rate);
  std::vector<Tensor> vrows, arows;
  uint64_t visual_index = 0;
  for (const ConditionMedia& m : r.media) {
    // Sound first: a video's soundtrack rows come before its video rows (only the order within each list
    // matters here).
    if (m.audio_samples > 0) {
      const Tensor wave = read_audio(m.path, sample_rate, m.audio_samples);
      H3_CHECK(wave.dim(1) == m.audio_samples,
               "{}: read {} audio samples, the request was resolved with {}; "
               "did the file change?",
               m.path, wave.dim(1), m.audio_samples);
      const Tensor w3 = wave.reshape({2, 1, wave.dim(1)});
      const Tensor z = avae.normalize(avae.encode_mean(w3.to(avae.compute_dtype()))).to(DType::f32);
      H3_CHECK(z.shape() == (Shape{2, Ca, m.audio_latents}), "{}: audio latents {} instead of [2, {}, {}]", m.path,
               z.describe(), Ca, m.audio_latents);
      arows.push_back(pack_audio(z).to(DType::f32));
    }
    if (!m.visual()) continue;
    Tensor pix;
    if (m.role == "video") {
      pix = read_video_frames(m.path, static_cast<int>(kFps), m.frames, m.width, m.height);
      H3_CHECK(pix.dim(1) == m.frames,
               "{}: read {} frames, the request was resolved with {}; did the file "
               "change?",
               m.path, pix.dim(1), m.frames);
    } else {
      const FitMode fit = m.role == "last" ? FitMode::cover : FitMode::stretch;
      pix = read_picture(m.path, m.width, m.height, fit).reshape({3, 1, m.height, m.width});
    }
    const Tensor mean = vvae.encode_mean(imagenet_normalize(pix).to(vvae.compute_dtype()));
    Tensor z = vvae.normalize(mean).to(DType::f32);
    H3_CHECK(z.shape() == Shape(shape_of(m, C)), "{}: video latents {} instead of [{}, {}, {}, {}]", m.path,
             z.describe(), C, m.latent_frames, m.latent_h, m.latent_w);
    // x = 0.999 z + 0.001 e, once (the rows stay fixed through the loop).
    const Tensor e = seeded_normal(z.shape(), r.seed, kConditionNoiseStream + visual_index++);
    float* zp = z.data<float>();
    const float* ep = e.data<float>();
    const auto keep = static_cast<float>(kConditionNoiseAug), mix = static_cast<float>(1.0 - kConditionNoiseAug);
    for (int64_t i = 0; i < z.numel(); ++i) zp[i] = keep * zp[i] + mix * ep[i];
    vrows.push_back(patchify_video(z).to(DType::f32));
  }
  ConditionRows out;
  out.video = concat_rows(vrows, C * kPatch * kPatch);
  out.audio = concat_rows(arows, Ca);
  return out;
}

std::string prompt_text_without_vision(const ResolvedRequest& r) {
  bool visual = false;
  for (const ConditionMedia& m : r.media) visual |= m.visual();
  if (visual || r.media.empty()) return r.prompt;
  std::string text;
  int j = 0;
  for (const ConditionMedia& m : r.media)
    if (m.role == "audio") text += fmt::format("<Audio {}>: ", ++j);
  return text + r.prompt;
}

namespace {

// [3, H, W] or frame f of [3, F, H, W], f32 in [0, 1] from the reader (values u8 / 255) -> u8 [H, W, 3].
Tensor to_u8_hwc(const Tensor& planes, int64_t f) {
  const bool video = planes.ndim() == 4;
  const int64_t F = video ? planes.dim(1) : 1, H = planes.dim(video ? 2 : 1), W = planes.dim(video ? 3 : 2);
  Tensor out(DType::u8, {H, W, 3});
  const float* src = planes.data<float>();
  uint8_t* o = out.data<uint8_t>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t i = 0; i < H * W; ++i) {
      const float v = src[(c * F + f) * H * W + i];
      o[i * 3 + c] = static_cast<uint8_t>(std::lround(std::clamp(v, 0.0f, 1.0f) * 255.0f));
    }
  return out;
}

Tensor concat_any_rows(const std::vector<Tensor>& parts) {
  if (parts.empty()) return {};
  const int64_t width = parts[0].dim(1);
  int64_t n = 0;
  for (const Tensor& t : parts) n += t.dim(0);
  Tensor out(parts[0].dtype(), {n, width});
  auto* o = static_cast<std::byte*>(out.raw());
  for (const Tensor& t : parts) {
    std::memcpy(o, t.raw(), t.nbytes());
    o += t.nbytes();
  }
  return out;
}

constexpr const char* kVisionTokens[] = {"<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"};

}  // namespace

VisionTokenIds vision_token_ids(const Tokenizer& tok) {
  VisionTokenIds ids;
  int32_t* slot[] = {&ids.vision_start, &ids.vision_end, &ids.image, &ids.video};
  for (size_t i = 0; i < 4; ++i) {
    *slot[i] = tok.token_to_id(kVisionTokens[i]);
    H3_CHECK(*slot[i] >= 0,
             "the tokenizer {} has no {} token, which keyframes and references need (Qwen3-VL's vision "
             "tokens): pass the released Qwen3-VL tokenizer",
             tok.source(), kVisionTokens[i]);
  }
  return ids;
}

std::vector<PromptMedia> prompt_media(const ResolvedRequest& r, const std::vector<GridThw>& grids,
                                      const std::vector<std::vector<double>>& timestamps) {
  std::vector<PromptMedia> out;
  size_t v = 0;
  for (const ConditionMedia& m : r.media) {
    PromptMedia pm;
    if (m.role == "audio") {
      pm.kind = PromptMedia::Kind::audio;
      out.push_back(pm);
      continue;
    }
    H3_CHECK(v < grids.size(), "prompt: visual condition {} ({}) has no vision grid", v + 1, m.path);
    pm.grid = grids[v];
    if (m.role == "video") {
      pm.kind = PromptMedia::Kind::video;
      pm.video_has_audio = m.audio_samples > 0;
      pm.timestamps = timestamps.at(v);
    }
    ++v;
    out.push_back(std::move(pm));
  }
  return out;
}

PromptInputs prepare_prompt(const ResolvedRequest& r, const Tokenizer& tok, const Qwen3VlVisionModel* vision) {
  PromptInputs in;
  bool visual = false;
  for (const ConditionMedia& m : r.media) visual |= m.visual();
  if (!visual) {
    in.text = prompt_text_without_vision(r);
    in.ids = tok.encode(in.text);
    H3_CHECK(!in.ids.empty(), "the prompt gives no tokens");
    return in;
  }
  H3_CHECK(vision, "{} request with pictures/videos but no Qwen3-VL vision tower loaded", r.mode);
  for (const char* t : kVisionTokens)
    H3_CHECK(r.prompt.find(t) == std::string::npos,
             "the prompt contains the special token {}; with keyframes or references the engine places the "
             "vision tokens itself: remove it from the prompt",
             t);
  const VisionTokenIds tok_ids = vision_token_ids(tok);
  const Qwen3VlVisionConfig& vc = vision->config();
  VlPreprocessConfig image_cfg, video_cfg = VlPreprocessConfig::video_defaults();
  for (VlPreprocessConfig* c : {&image_cfg, &video_cfg}) {
    c->patch = vc.patch;
    c->temporal_patch = vc.temporal_patch;
    c->merge = vc.merge;
  }
  Qwen3VlInputs q;
  std::vector<Tensor> image_rows, video_rows;
  std::vector<GridThw> grids;  // per visual media, in r.media order
  std::vector<std::vector<double>> stamps;
  for (const ConditionMedia& m : r.media) {
    if (!m.visual()) continue;
    if (m.role == "video") {
      // The normalized reference video: 24 fps, cut to the target's frame count (not the VAE's 17n+5), on its own
      // canvas; its 2 fps samples go to the processor.
      // Only the frame count up to the target's is needed: stop after the frames the request reads.
      const MediaInfo info = scan_media(m.path, static_cast<int>(kFps), 32000, std::max<int64_t>(r.frames, 1) + 1, 1);
      const std::vector<int64_t> idx =
          sample_frame_indices(std::min(info.frames, r.frames), static_cast<double>(kFps), 2.0);
      H3_CHECK(!idx.empty(), "{}: no frames to sample at 2 fps", m.path);
      const Tensor all = read_video_frames(m.path, static_cast<int>(kFps), idx.back() + 1, m.width, m.height);
      H3_CHECK(all.dim(1) > idx.back(),
               "{}: read {} frames at 24 fps, the 2 fps sampling needs {}; did the file change?", m.path, all.dim(1),
               idx.back() + 1);
      std::vector<Tensor> frames;
      for (int64_t i : idx) frames.push_back(to_u8_hwc(all, i));
      VlPixels px = preprocess_frames(frames, video_cfg);
      video_rows.push_back(px.pixels);
      q.video_grids.push_back(px.grid);
      grids.push_back(px.grid);
      stamps.push_back(temporal_patch_timestamps(idx, static_cast<double>(kFps), vc.temporal_patch));
    } else {
      // The keyframe on the canvas (first: stretched, last: cover-cropped), or the image reference at its short
      // edge: the pixels the VAE reads are the processor's input too.
      const FitMode fit = m.role == "last" ? FitMode::cover : FitMode::stretch;
      const Tensor pic = read_picture(m.path, m.width, m.height, fit);
      VlPixels px = preprocess_frames({to_u8_hwc(pic, 0)}, image_cfg);
      image_rows.push_back(px.pixels);
      q.image_grids.push_back(px.grid);
      grids.push_back(px.grid);
      stamps.emplace_back();
    }
  }
  q.image_pixels = concat_any_rows(image_rows);
  q.video_pixels = concat_any_rows(video_rows);
  in.text = h3_prompt_text(prompt_media(r, grids, stamps), r.prompt, vc.merge);
  q.ids = tok.encode(in.text);
  Qwen3VlPrepared prep = prepare_qwen3vl(*vision, q, tok_ids);
  in.ids = std::move(q.ids);
  in.positions = std::move(prep.positions);
  in.extras = std::move(prep.extras);
  const auto n = static_cast<int64_t>(in.ids.size());
  for (int64_t i = 0; i < n; ++i) {
    if (in.ids[i] != tok_ids.vision_start) continue;
    int64_t e = i + 1;
    while (e < n && in.ids[e] != tok_ids.vision_end) ++e;
    H3_CHECK(e < n, "prompt: the vision block at token {} has no <|vision_end|>", i);
    in.vision_ranges.emplace_back(i, e + 1);
    i = e;
  }
  return in;
}

PromptEncoding encode_prompt(const PromptInputs& in, const Qwen3VlTextModel& text, int64_t layer,
                             const TextLayerHook& before_layer) {
  PromptEncoding out;
  H3_CHECK(!in.ids.empty(), "the prompt gives no tokens");
  const bool vision = !in.extras.rows.empty();
  if (vision)
    H3_CHECK(in.extras.embeds.defined() && in.extras.embeds.dim(1) == text.config().hidden,
             "the vision tower's rows are {} wide but the text encoder's hidden size is {}: the tower and the "
             "LM come from different models",
             in.extras.embeds.defined() ? in.extras.embeds.dim(1) : 0, text.config().hidden);
  out.embeds = text.forward(in.ids, {layer}, false, in.positions.empty() ? nullptr : &in.positions,
                            vision ? &in.extras : nullptr, before_layer)
                   .hidden_states.at(layer)
                   .to(DType::f32)
                   .cpu();
  out.vision_ranges = in.vision_ranges;
  out.vision_rows = static_cast<int64_t>(in.extras.rows.size());
  return out;
}

}  // namespace h3

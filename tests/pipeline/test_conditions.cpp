// Keyframes and references: media input (media/media_read.h) on files the tests write with our own writers,
// request resolution and its errors, the packed layouts built from a request against the golden layouts, and
// `h3 generate` fl2va / ref2va end to end on 1, 2 and 3 ranks (pipeline/conditions.h).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

extern "C" {
#include <libavcodec/avcodec.h>
}

#include "io/safetensors.h"
#include "media/media_read.h"
#include "media/mp4_writer.h"
#include "model/dit/layout.h"
#include "pipeline/conditions.h"
#include "pipeline/generator.h"
#include "support/cli_run.h"
#include "support/error_of.h"
#include "support/golden.h"
#include "support/pictures.h"
#include "support/scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using h3::Shape;
using h3::Tensor;

using h3::test::error_of;
using h3::test::gradient_picture;

std::string write_png(const fs::path& dir, const std::string& name, int64_t h, int64_t w, float shift = 0.f) {
  const auto paths = h3::write_png_frames((dir / (name + "_%d.png")).string(), gradient_picture(1, h, w, shift));
  return paths.at(0);
}

Tensor sine(int64_t channels, int64_t n, double freq, int rate) {
  Tensor t(h3::DType::f32, {channels, n});
  for (int64_t c = 0; c < channels; ++c)
    for (int64_t i = 0; i < n; ++i)
      t.data<float>()[c * n + i] =
          static_cast<float>(0.5 * std::sin(2 * M_PI * freq * static_cast<double>(i) / rate + static_cast<double>(c)));
  return t;
}

std::string write_mp4(const fs::path& path, int64_t frames, int64_t h, int64_t w, int fps, int64_t samples) {
  h3::MediaSpec ms;
  ms.width = w;
  ms.height = h;
  ms.fps = fps;
  ms.channels = samples > 0 ? 2 : 0;
  ms.sample_rate = 32000;
  h3::Mp4Writer wr(path.string(), ms);
  wr.add_frames(gradient_picture(frames, h, w));
  if (samples > 0) wr.add_audio(sine(2, samples, 440, 32000));
  wr.finish();
  return path.string();
}

// A baseline JPEG of gradient_picture(1, h, w) from libavcodec's mjpeg encoder (one packet is one whole JFIF file).
std::string jpeg_bytes(int64_t h, int64_t w) {
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_MJPEG);
  if (!codec) return "";
  AVCodecContext* ctx = avcodec_alloc_context3(codec);
  ctx->width = static_cast<int>(w);
  ctx->height = static_cast<int>(h);
  ctx->pix_fmt = AV_PIX_FMT_YUVJ420P;
  ctx->time_base = AVRational{1, 24};
  AVFrame* f = av_frame_alloc();
  AVPacket* pkt = av_packet_alloc();
  std::string out;
  if (avcodec_open2(ctx, codec, nullptr) >= 0) {
    f->format = ctx->pix_fmt;
    f->width = ctx->width;
    f->height = ctx->height;
    av_frame_get_buffer(f, 0);
    const Tensor pic = gradient_picture(1, h, w);
    for (int64_t y = 0; y < h; ++y)
      for (int64_t x = 0; x < w; ++x) {  // full-range BT.601 luma; flat chroma is enough for a test picture
        const double r = pic.get((0 * h + y) * w + x), g = pic.get((1 * h + y) * w + x),
                     b = pic.get((2 * h + y) * w + x);
        f->data[0][y * f->linesize[0] + x] =
            static_cast<uint8_t>(std::lround(255 * (0.299 * r + 0.587 * g + 0.114 * b)));
        f->data[1][(y / 2) * f->linesize[1] + x / 2] = 128;
        f->data[2][(y / 2) * f->linesize[2] + x / 2] = 128;
      }
    if (avcodec_send_frame(ctx, f) >= 0 && avcodec_send_frame(ctx, nullptr) >= 0 &&
        avcodec_receive_packet(ctx, pkt) >= 0)
      out.assign(reinterpret_cast<const char*>(pkt->data), static_cast<size_t>(pkt->size));
  }
  av_packet_free(&pkt);
  av_frame_free(&f);
  avcodec_free_context(&ctx);
  return out;
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) m = std::max(m, std::abs(a.get(i) - b.get(i)));
  return m;
}

}  // namespace

TEST(MediaRead, PictureRoundTripsAndCoverCropsTheCentre) {
  h3::test::ScratchDir dir;
  const std::string png = write_png(dir.path(), "pic", 48, 80);
  const h3::MediaInfo info = h3::scan_media(png);
  EXPECT_TRUE(info.has_video && info.still && !info.has_audio);
  EXPECT_EQ(info.width, 80);
  EXPECT_EQ(info.height, 48);
  EXPECT_EQ(info.frames, 1);
  // Same size: only 8-bit rounding.
  const Tensor same = h3::read_picture(png, 80, 48, h3::FitMode::stretch);
  ASSERT_EQ(same.shape(), (Shape{3, 48, 80}));
  EXPECT_LE(max_abs_diff(same, gradient_picture(1, 48, 80).reshape({3, 48, 80})), 0.5 / 255 + 1e-6);
  // Cover 80x48 -> 48x48: scale 1, crop columns 16..63; the red ramp there runs 16/79 .. 63/79.
  const Tensor cover = h3::read_picture(png, 48, 48, h3::FitMode::cover);
  ASSERT_EQ(cover.shape(), (Shape{3, 48, 48}));
  EXPECT_NEAR(cover.get(0 * 48 * 48 + 20 * 48 + 0), 16.0 / 79, 1.0 / 255 + 1e-6);
  EXPECT_NEAR(cover.get(0 * 48 * 48 + 20 * 48 + 47), 63.0 / 79, 1.0 / 255 + 1e-6);
  // Stretch keeps the ramp ends.
  const Tensor st = h3::read_picture(png, 40, 24, h3::FitMode::stretch);
  EXPECT_NEAR(st.get(0 * 24 * 40 + 10 * 40 + 0), 0.0, 0.03);
  EXPECT_NEAR(st.get(0 * 24 * 40 + 10 * 40 + 39), 1.0, 0.03);
}

// A truncated JPEG as a keyframe is an error naming the file and the damage, on every path that reads it (the
// scan every request and upload goes through, the pixels, `h3 generate --first`), never a silently grey frame.
TEST(MediaRead, TruncatedJpegKeyframeIsRefused) {
  h3::test::ScratchDir dir;
  const std::string whole = jpeg_bytes(48, 80);
  ASSERT_GT(whole.size(), 200u) << "this libavcodec has no mjpeg encoder";
  ASSERT_EQ(whole.substr(0, 2), "\xFF\xD8");
  const std::string good = (dir.path() / "good.jpg").string();
  std::ofstream(good, std::ios::binary) << whole;
  const h3::MediaInfo info = h3::scan_media(good);
  EXPECT_TRUE(info.has_video && info.still);
  EXPECT_EQ(info.width, 80);
  EXPECT_EQ(info.height, 48);
  EXPECT_TRUE(info.warnings.empty());
  EXPECT_EQ(h3::read_picture(good, 80, 48, h3::FitMode::stretch).shape(), (Shape{3, 48, 80}));
  for (const double keep : {0.5, 0.8, 0.95}) {
    SCOPED_TRACE(keep);
    const std::string cut = (dir.path() / "cut.jpg").string();
    std::ofstream(cut, std::ios::binary | std::ios::trunc)
        << whole.substr(0, static_cast<size_t>(keep * static_cast<double>(whole.size())));
    for (const std::string& e : {error_of([&] { h3::scan_media(cut); }),
                                 error_of([&] { h3::read_picture(cut, 80, 48, h3::FitMode::stretch); })}) {
      EXPECT_NE(e.find("cut.jpg"), std::string::npos) << e;
      EXPECT_NE(e.find("damaged"), std::string::npos) << e;
    }
    const std::string out = (dir.path() / "cut.mp4").string();
    const h3::test::CliResult r =
        h3::test::run_h3("generate --prompt x --width 128 --height 64 --first " + cut + " -o " + out);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("damaged"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("dit "), std::string::npos) << "refused before any model loads:\n" << r.out;
    EXPECT_FALSE(fs::exists(out));
  }
}

TEST(MediaRead, VideoIsHeldTo24FpsAndCarriesItsSoundtrack) {
  h3::test::ScratchDir dir;
  // 12 fps for 1 s -> 24 frames at 24 fps, each source frame shown twice.
  const std::string mp4 = write_mp4(dir / "v12.mp4", 12, 32, 64, 12, 32000);
  const h3::MediaInfo info = h3::scan_media(mp4);
  EXPECT_TRUE(info.has_video && info.has_audio && !info.still);
  EXPECT_EQ(info.frames, 24);
  EXPECT_EQ(info.width, 64);
  EXPECT_NEAR(static_cast<double>(info.audio_samples), 32000.0, 1100.0);  // AAC frame padding
  const Tensor v = h3::read_video_frames(mp4, 24, 100, 64, 32);
  ASSERT_EQ(v.shape(), (Shape{3, 24, 32, 64}));
  const int64_t plane = 32 * 64;
  auto blue = [&](int64_t f) { return v.get((2 * 24 + f) * plane + 16 * 64 + 32); };
  for (int64_t f = 0; f < 24; f += 2) {
    EXPECT_NEAR(blue(f), blue(f + 1), 2.0 / 255) << "frame " << f << " is held";
    EXPECT_NEAR(blue(f), 0.5 + 0.4 * std::sin(0.3 * static_cast<double>(f / 2)), 0.03) << f;
  }
  // Truncation to a frame budget.
  EXPECT_EQ(h3::read_video_frames(mp4, 24, 5, 32, 32).dim(1), 5);
  // The soundtrack.
  const Tensor a = h3::read_audio(mp4, 32000, 1000);
  EXPECT_EQ(a.shape(), (Shape{2, 1000}));
}

TEST(MediaRead, AudioIsResampledAndMonoDuplicated) {
  h3::test::ScratchDir dir;
  const std::string wav = (dir / "mono16k.wav").string();
  h3::write_wav(wav, sine(1, 16000, 200, 16000), 16000);
  const h3::MediaInfo info = h3::scan_media(wav);
  EXPECT_TRUE(info.has_audio && !info.has_video);
  EXPECT_NEAR(static_cast<double>(info.audio_samples), 32000.0, 4.0);
  const Tensor a = h3::read_audio(wav, 32000, 0);
  ASSERT_EQ(a.dim(0), 2);
  EXPECT_EQ(a.dim(1), info.audio_samples) << "scan and read agree";
  double rms = 0, diff = 0;
  for (int64_t i = 1000; i < 31000; ++i) {
    rms += a.get(i) * a.get(i);
    diff = std::max(diff, std::abs(a.get(i) - a.get(a.dim(1) + i)));
  }
  EXPECT_EQ(diff, 0.0) << "mono goes to both channels unchanged";
  EXPECT_NEAR(std::sqrt(rms / 30000), 0.5 / std::sqrt(2.0), 0.02);
  EXPECT_EQ(h3::read_audio(wav, 32000, 777).dim(1), 777);
}

// Audio of any channel count the limits allow is read, also in no layout libswresample names (a WAV of 9 or 25..64
// channels): the even-numbered channels averaged to the left, the odd-numbered ones to the right.
TEST(MediaRead, ManyChannelsInNoNamedLayoutAreMixedToStereo) {
  h3::test::ScratchDir dir;
  for (const int channels : {9, 25, 64}) {
    SCOPED_TRACE(channels);
    const int rate = 32000, frames = 3200;
    std::string pcm;
    for (int t = 0; t < frames; ++t)
      for (int c = 0; c < channels; ++c) {
        const int16_t v = static_cast<int16_t>(400 * (c + 1));  // channel c holds 400 (c + 1) throughout
        pcm.append(reinterpret_cast<const char*>(&v), 2);
      }
    auto u32 = [](uint32_t v) { return std::string(reinterpret_cast<const char*>(&v), 4); };
    auto u16 = [](uint16_t v) { return std::string(reinterpret_cast<const char*>(&v), 2); };
    const std::string wav = (dir / ("c" + std::to_string(channels) + ".wav")).string();
    std::ofstream(wav, std::ios::binary) << "RIFF" << u32(static_cast<uint32_t>(36 + pcm.size())) << "WAVEfmt "
                                         << u32(16) << u16(1) << u16(static_cast<uint16_t>(channels)) << u32(rate)
                                         << u32(static_cast<uint32_t>(rate * 2 * channels))
                                         << u16(static_cast<uint16_t>(2 * channels)) << u16(16) << "data"
                                         << u32(static_cast<uint32_t>(pcm.size())) << pcm;
    const Tensor a = h3::read_audio(wav, rate, 0);
    ASSERT_EQ(a.dim(0), 2);
    ASSERT_EQ(a.dim(1), frames);
    double left = 0, right = 0;  // the expected means, as fractions of full scale
    for (int c = 0; c < channels; c += 2) left += 400.0 * (c + 1) / 32768 / ((channels + 1) / 2);
    for (int c = 1; c < channels; c += 2) right += 400.0 * (c + 1) / 32768 / (channels / 2);
    EXPECT_NEAR(a.get(frames / 2), left, 1e-3);
    EXPECT_NEAR(a.get(frames + frames / 2), right, 1e-3);
  }
}

TEST(MediaRead, ErrorsNameTheFileAndWhatToDo) {
  h3::test::ScratchDir dir;
  EXPECT_NE(error_of([&] { h3::scan_media((dir / "nope.png").string()); }).find("does not exist"), std::string::npos);
  const std::string txt = (dir / "notes.png").string();
  std::ofstream(txt) << "this is not a picture";
  EXPECT_NE(error_of([&] { h3::scan_media(txt); }).find("notes.png"), std::string::npos);
  const std::string wav = (dir / "a.wav").string();
  h3::write_wav(wav, sine(2, 3200, 300, 32000), 32000);
  EXPECT_NE(error_of([&] { h3::read_picture(wav, 32, 32, h3::FitMode::stretch); }).find("holds no picture"),
            std::string::npos);
  const std::string png = write_png(dir.path(), "p", 32, 32);
  EXPECT_NE(error_of([&] { h3::read_audio(png, 32000, 0); }).find("holds no sound"), std::string::npos);
}

// ---- request resolution -------------------------------------------------------------------------------

namespace {
h3::GenerateRequest base_request() {
  h3::GenerateRequest r;
  r.prompt = "a lighthouse at dusk";
  r.seed = 3;
  r.steps = 3;
  return r;
}
}  // namespace

TEST(ConditionRequest, KeyframesSetTheAspectAndModesDoNotMix) {
  h3::test::ScratchDir dir;
  const std::string first = write_png(dir.path(), "first", 96, 64);  // portrait 2:3
  const std::string last = write_png(dir.path(), "last", 64, 64);
  h3::GenerateRequest q = base_request();
  q.first_image = first;
  q.last_image = last;
  const h3::ResolvedRequest r = h3::resolve(q);
  EXPECT_EQ(r.mode, "fl2va");
  EXPECT_LT(r.width, r.height) << "the first keyframe's portrait aspect";
  ASSERT_EQ(r.media.size(), 2u);
  EXPECT_EQ(r.media[0].role, "first");
  EXPECT_EQ(r.media[1].role, "last");
  EXPECT_EQ(r.media[1].latent_h, r.latent_h);
  // Round trip through JSON (the request is broadcast that way).
  const h3::ResolvedRequest back = h3::ResolvedRequest::from_json(r.to_json());
  EXPECT_EQ(back.to_json(), r.to_json());
  // Through GenerateRequest JSON too.
  const h3::GenerateRequest qb = h3::GenerateRequest::from_json(q.to_json());
  EXPECT_EQ(qb.first_image, first);

  h3::GenerateRequest mixed = q;
  mixed.references.push_back({"image", first});
  EXPECT_NE(error_of([&] { h3::resolve(mixed); }).find("cannot be combined"), std::string::npos);
  h3::GenerateRequest missing = base_request();
  missing.first_image = (dir / "missing.png").string();
  EXPECT_NE(error_of([&] { h3::resolve(missing); }).find("does not exist"), std::string::npos);
  h3::GenerateRequest kind = base_request();
  kind.references.push_back({"picture", first});
  EXPECT_NE(error_of([&] { h3::resolve(kind); }).find("allowed: image, video, audio"), std::string::npos);
  h3::GenerateRequest many = base_request();
  for (int i = 0; i < 9; ++i) many.references.push_back({"image", first});
  EXPECT_NE(error_of([&] { h3::resolve(many); }).find("at most 8"), std::string::npos);
}

TEST(ConditionRequest, ReferencesGetTheirGeometry) {
  h3::test::ScratchDir dir;
  const std::string img = write_png(dir.path(), "img", 48, 80);
  const std::string wav = (dir / "a.wav").string();
  h3::write_wav(wav, sine(2, 32000 * 6, 300, 32000), 32000);  // 6 s: truncated to the 124-frame target
  const std::string vid = write_mp4(dir / "v.mp4", 30, 32, 64, 24, 0);
  const std::string tiny = write_mp4(dir / "tiny.mp4", 3, 32, 64, 24, 0);
  h3::ModelLimits lim;
  lim.ref_image_short_edge = 96;
  lim.ref_video_short_edge = 64;
  h3::GenerateRequest q = base_request();
  q.width = 128;
  q.height = 64;
  q.references = {{"audio", wav}, {"image", img}, {"video", vid}};
  const h3::ResolvedRequest r = h3::resolve(q, lim);
  EXPECT_EQ(r.mode, "ref2va");
  ASSERT_EQ(r.media.size(), 3u);
  EXPECT_EQ(r.media[0].role, "audio");
  EXPECT_EQ(r.media[0].audio_samples, 124 * 32000 / 24);
  EXPECT_EQ(r.media[0].audio_latents, 207);
  EXPECT_EQ(r.media[1].height, 96);
  EXPECT_EQ(r.media[1].width, 160);  // 80 * 2, a multiple of 32
  EXPECT_EQ(r.media[2].frames, 22);  // 30 snapped down to 17n+5
  EXPECT_EQ(r.media[2].latent_frames, 7);
  EXPECT_EQ(r.media[2].width, 128);
  EXPECT_EQ(r.media[2].height, 64);
  EXPECT_EQ(r.media[2].audio_latents, 0);
  const h3::PackedLayout l = h3::request_layout(r, std::vector<int64_t>(5, h3::kTagText));
  EXPECT_EQ(l.num_condition_audio_rows, 2 * 207);
  EXPECT_EQ(l.num_condition_video_rows, (96 / 32) * (160 / 32) + 7 * 2 * 4);

  h3::GenerateRequest bad = q;
  bad.references = {{"video", tiny}};
  EXPECT_NE(error_of([&] { h3::resolve(bad, lim); }).find("at least 5"), std::string::npos);
  bad.references = {{"image", wav}};
  EXPECT_NE(error_of([&] { h3::resolve(bad, lim); }).find("holds no picture"), std::string::npos);
  bad.references = {{"audio", img}};
  EXPECT_NE(error_of([&] { h3::resolve(bad, lim); }).find("holds no sound"), std::string::npos);
  bad.references = {{"image", vid}};
  EXPECT_NE(error_of([&] { h3::resolve(bad, lim); }).find("give a single picture"), std::string::npos);
}

// ---- layouts built from a request against the golden layouts -----------------------------------------

namespace {

template <typename T>
int64_t count_differences(const h3::SafeTensors& f, const std::string& key, const std::vector<T>& got) {
  const Tensor want = f.get(key);
  EXPECT_EQ(static_cast<size_t>(want.numel()), got.size()) << key;
  if (static_cast<size_t>(want.numel()) != got.size()) return -1;
  int64_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) bad += std::memcmp(&want.data<T>()[i], &got[i], sizeof(T)) != 0;
  return bad;
}

void expect_layout_matches(const h3::SafeTensors& f, const std::string& name, const h3::PackedLayout& l) {
  EXPECT_EQ(count_differences(f, name + ".position_ids", l.position_ids), 0) << name;
  EXPECT_EQ(count_differences(f, name + ".token_tags", l.token_tags), 0) << name;
  EXPECT_EQ(count_differences(f, name + ".video_indices", l.video_indices), 0) << name;
  EXPECT_EQ(count_differences(f, name + ".audio_indices", l.audio_indices), 0) << name;
  EXPECT_EQ(count_differences(f, name + ".text_indices", l.text_indices), 0) << name;
}

nlohmann::json geometry_of(const h3::SafeTensors& f, const std::string& name) {
  return nlohmann::json::parse(f.meta("geometries")).at(name);
}

}  // namespace

// fl2va: keyframe files through resolve() (canvas, frame snapping, roles) -> request_layout.
TEST(ConditionLayoutGolden, Fl2vaRequestBuildsTheGoldenLayout) {
  const auto file = h3::test::golden("layouts.safetensors");
  H3_REQUIRE_GOLDEN(file);
  const h3::SafeTensors f = h3::SafeTensors::open(file);
  const std::string name = "fl2va_480p_100";
  const nlohmann::json g = geometry_of(f, name);
  h3::test::ScratchDir dir;
  h3::GenerateRequest q = base_request();
  q.height = g.at("latent_h").get<int64_t>() * 16;
  q.width = g.at("latent_w").get<int64_t>() * 16;
  q.frames = g.at("num_frames").get<int64_t>();
  q.first_image = write_png(dir.path(), "first", 60, 104);
  q.last_image = write_png(dir.path(), "last", 90, 90, 1.f);
  h3::ModelLimits lim;
  lim.min_frames = 5;  // the golden case is shorter than the released duration window
  const h3::ResolvedRequest r = h3::resolve(q, lim);
  EXPECT_EQ(r.frames, g.at("frames").get<int64_t>());
  EXPECT_EQ(r.latent_frames, g.at("T").get<int64_t>());
  EXPECT_EQ(r.audio_latents, g.at("A").get<int64_t>());
  std::vector<std::pair<int64_t, int64_t>> vision;
  for (const auto& v : g.at("vision_rows")) vision.emplace_back(v.get<int64_t>(), v.get<int64_t>() + 1);
  const h3::PackedLayout l = h3::request_layout(r, h3::text_tags_with_vision(g.at("num_text"), vision));
  EXPECT_EQ(l.seq_len, g.at("S").get<int64_t>());
  EXPECT_EQ(l.num_condition_video_rows, g.at("ncv").get<int64_t>());
  expect_layout_matches(f, name, l);
}

// ref2va: the resolved references (kinds, order, latent shapes, audio lengths from the golden metadata) ->
// request_layout.
TEST(ConditionLayoutGolden, Ref2vaResolvedReferencesBuildTheGoldenLayouts) {
  const auto file = h3::test::golden("layouts-ref2va.safetensors");
  H3_REQUIRE_GOLDEN(file);
  const h3::SafeTensors f = h3::SafeTensors::open(file);
  const nlohmann::json all = nlohmann::json::parse(f.meta("geometries"));
  ASSERT_FALSE(all.empty());
  for (const auto& [name, g] : all.items()) {
    SCOPED_TRACE(name);
    h3::ResolvedRequest r;
    r.mode = "ref2va";
    r.frames = g.at("frames");
    r.latent_frames = g.at("T");
    r.latent_h = g.at("latent_h");
    r.latent_w = g.at("latent_w");
    r.audio_latents = g.at("A");
    for (const auto& ref : g.at("references")) {
      h3::ConditionMedia m;
      m.role = ref.at("kind");
      m.path = "unused";
      m.audio_latents = ref.at("audio_latents_per_channel");
      if (!ref.at("latent_shape").is_null()) {
        m.latent_frames = ref.at("latent_shape")[0];
        m.latent_h = ref.at("latent_shape")[1];
        m.latent_w = ref.at("latent_shape")[2];
      }
      r.media.push_back(m);
    }
    std::vector<std::pair<int64_t, int64_t>> vision;
    for (const auto& v : g.at("vision_rows")) vision.emplace_back(v[0].get<int64_t>(), v[1].get<int64_t>());
    const h3::PackedLayout l = h3::request_layout(r, h3::text_tags_with_vision(g.at("L"), vision));
    EXPECT_EQ(l.seq_len, g.at("S").get<int64_t>());
    EXPECT_EQ(l.num_condition_video_rows, g.at("num_condition_video_rows").get<int64_t>());
    EXPECT_EQ(l.num_condition_audio_rows, g.at("num_condition_audio_rows").get<int64_t>());
    expect_layout_matches(f, name, l);
  }
}

// ---- h3 generate fl2va / ref2va end to end -------------------------------------------------------------

namespace {

using h3::test::CliResult;
using h3::test::run_h3;

std::string slurp(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void expect_same_latents_on_1_2_3_ranks(const fs::path& dir, const std::string& media_args,
                                        const std::string& expect_in_request) {
  const std::string common =
      "--log-level warn generate --prompt 'a harbour at dawn' --width 128 --height 64 --steps 3 --seed 5 "
      "--latents " +
      media_args;
  std::string first;
  // The last run keeps the text tower (and the vision rows it receives from rank 0) on a dedicated encoder
  // rank.
  for (const auto& [ranks, extra] :
       {std::pair{"--ranks 1", ""}, {"--ranks 2", ""}, {"--ranks 3", ""}, {"--ranks 3", " --encoder-ranks 1"}}) {
    SCOPED_TRACE(std::string(ranks) + extra);
    const fs::path out = dir / "clip.mp4";
    const CliResult r = run_h3(std::string(ranks) + " " + common + extra + " -o " + out.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(expect_in_request), std::string::npos) << r.out;
    const std::string mp4 = slurp(out);
    ASSERT_GT(mp4.size(), 1000u) << r.out;
    EXPECT_EQ(mp4.substr(4, 4), "ftyp");
    const std::string latents = slurp(dir / "clip.latents.safetensors");
    ASSERT_FALSE(latents.empty());
    if (first.empty()) first = latents;
    EXPECT_TRUE(latents == first) << "latents differ from the 1-rank run";
    fs::remove(out);
    fs::remove(dir / "clip.latents.safetensors");
  }
}

}  // namespace

TEST(ConditionCli, Fl2vaOneTwoAndThreeRanksWriteTheSameLatents) {
  h3::test::ScratchDir dir;
  const std::string first = write_png(dir.path(), "first", 64, 128);
  const std::string last = write_png(dir.path(), "last", 80, 80, 2.f);
  expect_same_latents_on_1_2_3_ranks(dir.path(), "--first " + first + " --last " + last,
                                     "(vision rows 144 in 2 blocks)");
  // The condition rows matter: another last keyframe changes the result.
  const std::string other = write_png(dir.path(), "other", 80, 80, 0.f);
  const auto a = run_h3(
      "--log-level warn generate --prompt x --width 128 --height 64 --steps 2 --seed 5 --latents "
      "--first " +
      first + " --last " + last + " -o " + (dir / "a.mp4").string());
  const auto b = run_h3(
      "--log-level warn generate --prompt x --width 128 --height 64 --steps 2 --seed 5 --latents "
      "--first " +
      first + " --last " + other + " -o " + (dir / "b.mp4").string());
  ASSERT_EQ(a.status, 0) << a.out;
  ASSERT_EQ(b.status, 0) << b.out;
  EXPECT_NE(slurp(dir / "a.latents.safetensors"), slurp(dir / "b.latents.safetensors"));
  // The keyframes are in the prompt as the processor sees them on the 128x64 canvas (the reference's pipeline puts
  // them there first): smart_resize lifts 128x64 to the 65,536-pixel minimum, beta = sqrt(65536 / 8192), sides
  // ceil(64 * beta / 32) * 32 = 192 and ceil(128 * beta / 32) * 32 = 384, 12 x 24 patches = 72 rows each (the files'
  // own sizes gave 72 and 64); nothing warns about missing vision rows.
  EXPECT_NE(a.out.find("(vision rows 144 in 2 blocks)"), std::string::npos) << a.out;
  EXPECT_EQ(a.out.find("warning:"), std::string::npos) << a.out;
}

TEST(ConditionCli, Ref2vaOneTwoAndThreeRanksWriteTheSameLatents) {
  h3::test::ScratchDir dir;
  const std::string img = write_png(dir.path(), "img", 48, 64);
  const std::string vid = write_mp4(dir.path() / "ref.mp4", 24, 64, 64, 24, 16000);
  const std::string wav = (dir.path() / "ref.wav").string();
  h3::write_wav(wav, sine(1, 24000, 220, 32000), 32000);
  // Order as given: video, image, audio, image.
  expect_same_latents_on_1_2_3_ranks(
      dir.path(), "--ref-video " + vid + " --ref-image " + img + " --ref-audio " + wav + " --ref-image " + img,
      "(vision rows 144 in 3 blocks)");
  const CliResult r = run_h3(
      "--log-level warn generate --prompt x --width 128 --height 64 --steps 2 --seed 1 "
      "--ref-audio " +
      wav + " --ref-image " + img + " -o " + (dir.path() / "o.mp4").string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_LT(r.out.find("\"role\": \"audio\""), r.out.find("\"role\": \"image\"")) << "command-line order kept";
}

TEST(ConditionCli, BadMediaRequestsAreRefusedBeforeAnyWork) {
  h3::test::ScratchDir dir;
  const std::string img = write_png(dir.path(), "img", 32, 32);
  const std::string out = (dir.path() / "bad.mp4").string();
  const std::pair<std::string, const char*> cases[] = {
      {"--first " + (dir.path() / "none.png").string(), "does not exist"},
      {"--first " + img + " --ref-image " + img, "cannot be combined"},
      {"--ref-audio " + img, "holds no sound"},
      {"--ref-video " + img, "single picture"},
  };
  for (const auto& [args, expect] : cases) {
    SCOPED_TRACE(args);
    const CliResult r = run_h3("generate --prompt x --width 128 --height 64 " + args + " -o " + out);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("dit "), std::string::npos) << "no model may be loaded for a bad request:\n" << r.out;
    EXPECT_FALSE(fs::exists(out));
  }
}

// A FIFO or a device as a keyframe or reference is refused at once (a FIFO blocked the open forever).
TEST(MediaRead, NonRegularFilesAreRefusedAtOnce) {
  h3::test::ScratchDir dir;
  const std::string fifo = (dir.path() / "frame.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  for (const std::string& p : {fifo, std::string("/dev/zero")}) {
    const std::string e = error_of([&] { h3::scan_media(p); });
    EXPECT_NE(e.find("give a regular file"), std::string::npos) << p << ": " << e;
    const std::string e2 = error_of([&] { h3::read_picture(p, 80, 48, h3::FitMode::stretch); });
    EXPECT_NE(e2.find("give a regular file"), std::string::npos) << p << ": " << e2;
  }
}

// Media output (src/media) and `h3 decode`, checked from the outside: every file is read back with
// libavformat / libavcodec / libswscale (demuxers, decoders and a colour converter that share no code with
// the writers), and the expected numbers come from the inputs (golden pixels and waveform, sizes, sample
// rates), never from our writers.
#include <gtest/gtest.h>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/opt.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <numbers>
#include <string>
#include <tuple>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"
#include "media/mp4_writer.h"
#include "support/cli_run.h"
#include "support/golden.h"
#include "support/pictures.h"
#include "support/scratch_dir.h"

namespace fs = std::filesystem;
using h3::Tensor;
using h3::test::ScratchDir;

namespace {

// ---- reading media back
// ----------------------------------------------------------------------------------------

struct Decoded {
  bool ok = false;
  std::string error;
  std::string format;
  std::map<std::string, std::string> metadata;
  // video
  std::string vcodec;
  int width = 0, height = 0;
  AVRational avg_fps{0, 1}, r_fps{0, 1};
  int64_t nb_frames = 0;  // from the container
  double video_duration = 0;
  std::vector<std::vector<uint8_t>> rgb;   // decoded frames, packed RGB24
  std::vector<std::vector<uint8_t>> luma;  // decoded frames' Y plane (yuv formats)
  AVColorSpace colorspace = AVCOL_SPC_UNSPECIFIED;
  AVColorRange range = AVCOL_RANGE_UNSPECIFIED;
  // audio
  std::string acodec;
  int channels = 0, sample_rate = 0;
  double audio_duration = 0;
  std::vector<std::vector<float>> audio;  // decoded samples per channel
  double duration = 0;                    // container
};

float sample_at(const AVFrame* f, int c, int i) {
  const int nch = f->ch_layout.nb_channels;
  switch (f->format) {
    case AV_SAMPLE_FMT_FLTP:
      return reinterpret_cast<const float*>(f->data[c])[i];
    case AV_SAMPLE_FMT_FLT:
      return reinterpret_cast<const float*>(f->data[0])[i * nch + c];
    case AV_SAMPLE_FMT_S16P:
      return reinterpret_cast<const int16_t*>(f->data[c])[i] / 32768.0f;
    case AV_SAMPLE_FMT_S16:
      return reinterpret_cast<const int16_t*>(f->data[0])[i * nch + c] / 32768.0f;
    default:
      ADD_FAILURE() << "unexpected sample format " << f->format;
      return 0;
  }
}

Decoded decode_file(const std::string& path, const char* format_name = nullptr) {
  Decoded d;
  AVFormatContext* fc = nullptr;
  const AVInputFormat* ifmt = format_name ? av_find_input_format(format_name) : nullptr;
  if (avformat_open_input(&fc, path.c_str(), ifmt, nullptr) < 0) {
    d.error = "cannot open " + path;
    return d;
  }
  avformat_find_stream_info(fc, nullptr);
  d.format = fc->iformat->name;
  d.duration = fc->duration == AV_NOPTS_VALUE ? 0 : static_cast<double>(fc->duration) / AV_TIME_BASE;
  const AVDictionaryEntry* e = nullptr;
  while ((e = av_dict_get(fc->metadata, "", e, AV_DICT_IGNORE_SUFFIX))) d.metadata[e->key] = e->value;
  std::vector<AVCodecContext*> dec(fc->nb_streams, nullptr);
  int vi = -1, ai = -1;
  for (unsigned i = 0; i < fc->nb_streams; ++i) {
    const AVStream* st = fc->streams[i];
    const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
    if (!codec) continue;
    const double dur = st->duration == AV_NOPTS_VALUE ? 0 : st->duration * av_q2d(st->time_base);
    if (st->codecpar->codec_type == AVMEDIA_TYPE_VIDEO && vi < 0) {
      vi = static_cast<int>(i);
      d.vcodec = avcodec_get_name(st->codecpar->codec_id);
      d.width = st->codecpar->width;
      d.height = st->codecpar->height;
      d.avg_fps = st->avg_frame_rate;
      d.r_fps = st->r_frame_rate;
      d.nb_frames = st->nb_frames;
      d.video_duration = dur;
    } else if (st->codecpar->codec_type == AVMEDIA_TYPE_AUDIO && ai < 0) {
      ai = static_cast<int>(i);
      d.acodec = avcodec_get_name(st->codecpar->codec_id);
      d.channels = st->codecpar->ch_layout.nb_channels;
      d.sample_rate = st->codecpar->sample_rate;
      d.audio_duration = dur;
      d.audio.resize(static_cast<size_t>(d.channels));
    } else {
      continue;
    }
    dec[i] = avcodec_alloc_context3(codec);
    avcodec_parameters_to_context(dec[i], st->codecpar);
    avcodec_open2(dec[i], codec, nullptr);
  }
  AVPacket* pkt = av_packet_alloc();
  AVFrame* frame = av_frame_alloc();
  auto receive = [&](int i) {
    while (avcodec_receive_frame(dec[i], frame) >= 0) {
      if (i == vi) {
        d.colorspace = frame->colorspace;
        if (frame->format == AV_PIX_FMT_YUV420P || frame->format == AV_PIX_FMT_YUV444P) {
          std::vector<uint8_t> y(static_cast<size_t>(frame->width * frame->height));
          for (int r = 0; r < frame->height; ++r)
            std::copy_n(frame->data[0] + r * frame->linesize[0], frame->width, y.data() + r * frame->width);
          d.luma.push_back(std::move(y));
        }
        d.range = frame->color_range;
        // The chroma siting, matrix and range the stream declares (left, BT.709, limited for our writer).
        SwsContext* sws = sws_alloc_context();
        av_opt_set_int(sws, "srcw", frame->width, 0);
        av_opt_set_int(sws, "srch", frame->height, 0);
        av_opt_set_int(sws, "src_format", frame->format, 0);
        av_opt_set_int(sws, "dstw", frame->width, 0);
        av_opt_set_int(sws, "dsth", frame->height, 0);
        av_opt_set_int(sws, "dst_format", AV_PIX_FMT_RGB24, 0);
        av_opt_set_int(sws, "sws_flags", SWS_BICUBIC | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, 0);
        int cx = 0, cy = 0;
        if (frame->chroma_location != AVCHROMA_LOC_UNSPECIFIED &&
            avcodec_enum_to_chroma_pos(&cx, &cy, frame->chroma_location) == 0) {
          av_opt_set_int(sws, "src_h_chr_pos", cx, 0);
          av_opt_set_int(sws, "src_v_chr_pos", cy, 0);
        }
        if (sws_init_context(sws, nullptr, nullptr) < 0) ADD_FAILURE() << "sws_init_context";
        const int cs = frame->colorspace == AVCOL_SPC_UNSPECIFIED ? SWS_CS_DEFAULT : frame->colorspace;
        sws_setColorspaceDetails(sws, sws_getCoefficients(cs), frame->color_range == AVCOL_RANGE_JPEG,
                                 sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
        std::vector<uint8_t> rgb(static_cast<size_t>(frame->width * frame->height * 3));
        uint8_t* dst[1] = {rgb.data()};
        int stride[1] = {frame->width * 3};
        sws_scale(sws, frame->data, frame->linesize, 0, frame->height, dst, stride);
        sws_freeContext(sws);
        d.rgb.push_back(std::move(rgb));
      } else {
        for (int c = 0; c < d.channels; ++c)
          for (int s = 0; s < frame->nb_samples; ++s) d.audio[static_cast<size_t>(c)].push_back(sample_at(frame, c, s));
      }
      av_frame_unref(frame);
    }
  };
  while (av_read_frame(fc, pkt) >= 0) {
    const int i = pkt->stream_index;
    if (i >= 0 && i < static_cast<int>(dec.size()) && dec[i]) {
      avcodec_send_packet(dec[i], pkt);
      receive(i);
    }
    av_packet_unref(pkt);
  }
  for (int i = 0; i < static_cast<int>(dec.size()); ++i)
    if (dec[i]) {
      avcodec_send_packet(dec[i], nullptr);
      receive(i);
      avcodec_free_context(&dec[i]);
    }
  av_frame_free(&frame);
  av_packet_free(&pkt);
  avformat_close_input(&fc);
  d.ok = true;
  return d;
}

// Top-level MP4 boxes in file order (type and offset).
std::vector<std::pair<std::string, uint64_t>> top_level_boxes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<std::pair<std::string, uint64_t>> boxes;
  const uint64_t size = fs::file_size(path);
  uint64_t off = 0;
  while (off + 8 <= size) {
    unsigned char h[16];
    in.seekg(static_cast<std::streamoff>(off));
    in.read(reinterpret_cast<char*>(h), 8);
    uint64_t len = (uint64_t{h[0]} << 24) | (uint64_t{h[1]} << 16) | (uint64_t{h[2]} << 8) | h[3];
    const std::string type(reinterpret_cast<char*>(h + 4), 4);
    if (len == 1) {
      in.read(reinterpret_cast<char*>(h + 8), 8);
      len = 0;
      for (int i = 8; i < 16; ++i) len = (len << 8) | h[i];
    } else if (len == 0) {
      len = size - off;
    }
    boxes.emplace_back(type, off);
    if (len < 8) break;
    off += len;
  }
  return boxes;
}

// PSNR on the 0..255 scale over every pixel of every frame: decoded RGB24 against the input pixels x 255.
double psnr(const std::vector<std::vector<uint8_t>>& rgb, const Tensor& pixels) {
  const int64_t T = pixels.dim(1), H = pixels.dim(2), W = pixels.dim(3);
  double se = 0;
  int64_t n = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          const double ref = std::clamp(pixels.get(((c * T + t) * H + y) * W + x), 0.0, 1.0) * 255.0;
          const double got = rgb[static_cast<size_t>(t)][static_cast<size_t>((y * W + x) * 3 + c)];
          se += (got - ref) * (got - ref);
          ++n;
        }
  const double mse = se / static_cast<double>(n);
  return mse == 0 ? 99.0 : 10.0 * std::log10(255.0 * 255.0 / mse);
}

bool no_file_like(const fs::path& p) {
  return !fs::exists(p) && !fs::exists(p.string() + ".partial");
}

// ---- inputs
// ----------------------------------------------------------------------------------------------------

struct GoldenMedia {
  h3::SafeTensors f;
  Tensor pixels;  // [3, T, H, W]
  Tensor wave;    // [2, N]
};

// pipeline-t2va-mini's decoded pixels and waveform, found by shape rather than by a hard-coded name: the [3,
// T, H, W] tensor named "*pixels*" and the "*waveform*" tensor among its outputs.
GoldenMedia golden_media(const std::string& path) {
  GoldenMedia g{h3::SafeTensors::open(path), {}, {}};
  for (const auto& k : g.f.keys()) {
    if (k.find("output.") == std::string::npos) continue;
    const Tensor t = g.f.get(k);
    if (k.find("pixels") != std::string::npos && t.ndim() == 4 && t.dim(0) == 3) g.pixels = t;
    if (k.find("waveform") != std::string::npos) g.wave = t.reshape({t.dim(0), t.dim(-1)});
  }
  return g;
}

// A smooth synthetic clip [3, T, H, W]: moving colour gradients (easy to compress, exact expectations).
Tensor gradient_clip(int64_t T, int64_t H, int64_t W) {
  return h3::test::clip_of(T, H, W, [](int64_t c, int64_t t, int64_t y, int64_t x) {
    return 0.5f + 0.4f * std::sin(0.07f * static_cast<float>(x + 3 * t) + 0.05f * static_cast<float>(y) +
                                  2.0f * static_cast<float>(c));
  });
}

// Stereo tones: 440 Hz left, 1000 Hz right, amplitude 0.5.
Tensor stereo_tones(int64_t n, int rate) {
  Tensor w(h3::DType::f32, {2, n});
  float* d = w.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    const double t = static_cast<double>(i) / rate;
    d[i] = static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * 440.0 * t));
    d[n + i] = static_cast<float>(0.5 * std::sin(2 * std::numbers::pi * 1000.0 * t));
  }
  return w;
}

// ---- CLI
// -------------------------------------------------------------------------------------------------------

using h3::test::CliResult;
using h3::test::run_h3;

}  // namespace

// ---- MP4
// -------------------------------------------------------------------------------------------------------

TEST(Media, Mp4OfThePipelineGoldenProbesBackAndMatchesItsPixels) {
  const auto file = h3::test::golden("pipeline-t2va-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  const GoldenMedia g = golden_media(file);
  ASSERT_TRUE(g.pixels.defined() && g.pixels.numel() > 0) << "no [3,T,H,W] pixels output in " << file;
  ASSERT_TRUE(g.wave.defined() && g.wave.numel() > 0) << "no waveform output in " << file;
  const int64_t T = g.pixels.dim(1), H = g.pixels.dim(2), W = g.pixels.dim(3), N = g.wave.dim(1);
  ScratchDir dir;
  const fs::path out = dir / "pipeline.mp4";
  h3::MediaSpec spec;
  spec.width = W;
  spec.height = H;
  spec.metadata = {{"comment", R"({"prompt":"a test","seed":7})"}, {"h3_seed", "7"}, {"title", "golden"}};
  {
    h3::Mp4Writer w(out.string(), spec);
    // In pieces, audio interleaved with video, as a pipeline might deliver them.
    const int64_t half = T / 2;
    const Tensor first(h3::DType::f32, {3, half, H, W});
    for (int64_t c = 0; c < 3; ++c)
      std::copy_n(g.pixels.data<float>() + c * T * H * W, half * H * W, first.data<float>() + c * half * H * W);
    w.add_frames(first);
    EXPECT_FALSE(fs::exists(out)) << "the final name must appear only on finish()";
    w.add_audio(g.wave);
    const Tensor rest(h3::DType::f32, {3, T - half, H, W});
    for (int64_t c = 0; c < 3; ++c)
      std::copy_n(g.pixels.data<float>() + (c * T + half) * H * W, (T - half) * H * W,
                  rest.data<float>() + c * (T - half) * H * W);
    w.add_frames(rest);
    w.finish();
    EXPECT_EQ(w.frames_written(), T);
  }
  ASSERT_TRUE(fs::exists(out));
  EXPECT_FALSE(fs::exists(out.string() + ".partial"));

  const Decoded d = decode_file(out.string());
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_NE(d.format.find("mp4"), std::string::npos) << d.format;
  EXPECT_EQ(d.vcodec, "h264");
  EXPECT_EQ(d.acodec, "aac");
  EXPECT_EQ(d.width, W);
  EXPECT_EQ(d.height, H);
  EXPECT_EQ(av_cmp_q(d.avg_fps, AVRational{24, 1}), 0) << d.avg_fps.num << "/" << d.avg_fps.den;
  EXPECT_EQ(av_cmp_q(d.r_fps, AVRational{24, 1}), 0) << d.r_fps.num << "/" << d.r_fps.den;
  EXPECT_EQ(d.nb_frames, T);
  EXPECT_EQ(static_cast<int64_t>(d.rgb.size()), T);
  EXPECT_NEAR(d.video_duration, static_cast<double>(T) / 24.0, 1e-6);
  EXPECT_NEAR(d.duration, static_cast<double>(T) / 24.0, 0.01);
  EXPECT_EQ(d.channels, 2);
  EXPECT_EQ(d.sample_rate, 32000);
  EXPECT_NEAR(d.audio_duration, static_cast<double>(N) / 32000.0, 1e-6);
  EXPECT_EQ(d.colorspace, AVCOL_SPC_BT709);
  EXPECT_EQ(d.range, AVCOL_RANGE_MPEG);
  // Metadata: every key given, with its value.
  for (const auto& [k, v] : spec.metadata) {
    ASSERT_TRUE(d.metadata.count(k)) << "metadata key " << k << " missing";
    EXPECT_EQ(d.metadata.at(k), v) << k;
  }
  // faststart: moov before mdat.
  const auto boxes = top_level_boxes(out.string());
  int64_t moov = -1, mdat = -1;
  for (size_t i = 0; i < boxes.size(); ++i) {
    if (boxes[i].first == "moov" && moov < 0) moov = static_cast<int64_t>(i);
    if (boxes[i].first == "mdat" && mdat < 0) mdat = static_cast<int64_t>(i);
  }
  ASSERT_GE(moov, 0);
  ASSERT_GE(mdat, 0);
  EXPECT_LT(moov, mdat) << "moov must come before mdat (+faststart)";
  // Picture fidelity over all frames. These pixels come from random VAE weights: independent noise in every
  // pixel and channel (mean |neighbour difference| 0.3), so yuv420p's shared chroma cannot carry them — even
  // x264's lossless mode gives an RGB PSNR of only 12.8 dB here (docs/notes.md). The RGB PSNR is printed; the
  // fidelity check is on the luma plane the format does carry in full: decoded Y against the BT.709 Y' of the
  // golden pixels (16 + 219 Y', 0..255), over every pixel of every frame. Frames out of order or a wrong
  // matrix or range fall far below (uncorrelated noise frames give ~10 dB). The RGB >= 35 dB check is in the
  // next test, on a clip that 4:2:0 can represent.
  ASSERT_EQ(static_cast<int64_t>(d.luma.size()), T);
  double se = 0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x) {
        auto px = [&](int64_t c) { return g.pixels.get(((c * T + t) * H + y) * W + x); };
        const double luma = 16.0 + 219.0 * (0.2126 * px(0) + 0.7152 * px(1) + 0.0722 * px(2));
        const double e = d.luma[static_cast<size_t>(t)][static_cast<size_t>(y * W + x)] - luma;
        se += e * e;
      }
  const double luma_psnr = 10.0 * std::log10(255.0 * 255.0 / (se / static_cast<double>(T * H * W)));
  std::printf(
      "[ info ] golden pipeline pixels %lldx%lldx%lld, H.264 crf 18 yuv420p: luma PSNR %.2f dB, RGB PSNR "
      "%.2f dB; audio: %zu samples decoded for %lld\n",
      static_cast<long long>(T), static_cast<long long>(H), static_cast<long long>(W), luma_psnr, psnr(d.rgb, g.pixels),
      d.audio.empty() ? size_t{0} : d.audio[0].size(), static_cast<long long>(N));
  EXPECT_GE(luma_psnr, 33.0);
}

TEST(Media, Mp4SmoothClipReaches35dBAndTonesSurviveAac) {
  // A smooth synthetic clip (what 4:2:0 is made for): RGB PSNR over all frames >= 35 dB at the default crf
  // 18, and quality must follow the crf (fails when the option is ignored); the two stereo tones must come
  // back on their own channels, aligned with the input (the encoder priming removed through the edit list).
  const int64_t T = 30, H = 64, W = 96;
  const Tensor pixels = gradient_clip(T, H, W);
  const int rate = 32000;
  const Tensor tones = stereo_tones(rate, rate);
  ScratchDir dir;
  double p_best = 0, p_worst = 0;
  for (int crf : {18, 45}) {
    const fs::path out = dir / ("crf" + std::to_string(crf) + ".mp4");
    h3::MediaSpec spec;
    spec.width = W;
    spec.height = H;
    if (crf != 18) spec.crf = crf;  // 18 = the default
    h3::Mp4Writer w(out.string(), spec);
    w.add_audio(tones);
    w.add_frames(pixels);
    w.finish();
    const Decoded d = decode_file(out.string());
    ASSERT_TRUE(d.ok) << d.error;
    ASSERT_EQ(static_cast<int64_t>(d.rgb.size()), T);
    (crf != 45 ? p_best : p_worst) = psnr(d.rgb, pixels);
    if (crf == 45) continue;
    ASSERT_EQ(d.channels, 2);
    EXPECT_NEAR(d.audio_duration, 1.0, 1e-6);
    // The decoder output (priming removed through the edit list) lines up with the input; SNR per channel.
    const int64_t n = std::min<int64_t>(static_cast<int64_t>(d.audio[0].size()), rate);
    EXPECT_GE(n, rate - 1024);
    for (int c = 0; c < 2; ++c) {
      double sig = 0, err = 0, cross = 0;
      for (int64_t i = 0; i < n - 1024; ++i) {
        const double ref = tones.data<float>()[c * rate + i];
        const double other = tones.data<float>()[(1 - c) * rate + i];
        const double got = d.audio[static_cast<size_t>(c)][static_cast<size_t>(i)];
        sig += ref * ref;
        err += (got - ref) * (got - ref);
        cross += (got - other) * (got - other);
      }
      const double snr = 10 * std::log10(sig / err);
      std::printf("[ info ] AAC channel %d: SNR %.1f dB\n", c, snr);
      EXPECT_GE(snr, 20.0) << "channel " << c;
      EXPECT_GT(cross, 10 * err) << "channels swapped?";
    }
  }
  std::printf("[ info ] gradient clip PSNR: crf 18 %.2f dB, crf 45 %.2f dB\n", p_best, p_worst);
  EXPECT_GE(p_best, 35.0);
  EXPECT_GT(p_best, p_worst + 3.0);
}

TEST(Media, Mp4WithoutAudioTrackAndMonoUpmix) {
  ScratchDir dir;
  h3::MediaSpec spec;
  spec.width = 32;
  spec.height = 16;
  spec.channels = 0;
  {
    h3::Mp4Writer w((dir / "silent.mp4").string(), spec);
    w.add_frames(gradient_clip(5, 16, 32));
    EXPECT_THROW(w.add_audio(stereo_tones(100, 32000)), h3::Error);
  }
  EXPECT_TRUE(no_file_like(dir / "silent.mp4")) << "an unfinished writer must leave nothing";
  {
    h3::Mp4Writer w((dir / "silent.mp4").string(), spec);
    w.add_frames(gradient_clip(5, 16, 32));
    w.finish();
  }
  const Decoded d = decode_file((dir / "silent.mp4").string());
  EXPECT_EQ(d.acodec, "");
  EXPECT_EQ(d.rgb.size(), 5u);

  spec.channels = 2;
  {
    h3::Mp4Writer w((dir / "mono.mp4").string(), spec);
    w.add_frames(gradient_clip(24, 16, 32));
    Tensor mono = stereo_tones(32000, 32000).rows(0, 1);  // [1, N]
    w.add_audio(mono);
    w.finish();
  }
  const Decoded m = decode_file((dir / "mono.mp4").string());
  ASSERT_EQ(m.channels, 2);
  ASSERT_FALSE(m.audio[0].empty());
  double diff = 0;
  for (size_t i = 0; i < m.audio[0].size(); ++i) diff = std::max(diff, std::abs(double(m.audio[0][i] - m.audio[1][i])));
  EXPECT_LT(diff, 1e-2) << "a mono wave goes to both channels";
}

TEST(Media, Mp4ErrorsLeaveNoFileBehind) {
  ScratchDir dir;
  const fs::path out = dir / "bad.mp4";
  h3::MediaSpec spec;
  spec.width = 33;  // odd: yuv420p needs even sizes
  spec.height = 16;
  try {
    h3::Mp4Writer w(out.string(), spec);
    FAIL() << "odd width accepted";
  } catch (const h3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("even"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(no_file_like(out));

  spec.width = 32;
  // A folder that does not exist, and a path that is a folder.
  EXPECT_THROW(h3::Mp4Writer((dir / "no/such/dir/x.mp4").string(), spec), h3::Error);
  EXPECT_FALSE(fs::exists(dir / "no"));
  EXPECT_THROW(h3::Mp4Writer(dir.path().string(), spec), h3::Error);

  // Wrong shapes: channels-last, wrong size, 3-D; the writer refuses and, unfinished, removes its partial
  // file.
  {
    h3::Mp4Writer w(out.string(), spec);
    EXPECT_TRUE(fs::exists(out.string() + ".partial"));
    EXPECT_THROW(w.add_frames(Tensor(h3::DType::f32, {2, 16, 32, 3})), h3::Error);
    EXPECT_THROW(w.add_frames(Tensor(h3::DType::f32, {3, 2, 16, 30})), h3::Error);
    EXPECT_THROW(w.add_frames(Tensor(h3::DType::f32, {3, 16, 32})), h3::Error);
    EXPECT_THROW(w.add_frames(Tensor(h3::DType::i32, {3, 1, 16, 32})), h3::Error);
    EXPECT_THROW(w.add_audio(Tensor(h3::DType::f32, {3, 100})), h3::Error);
    EXPECT_THROW(w.finish(), h3::Error);  // no frames
  }
  EXPECT_TRUE(no_file_like(out));
  // An error inside finish() or after frames were encoded: still nothing at the final path.
  {
    h3::Mp4Writer w(out.string(), spec);
    w.add_frames(gradient_clip(3, 16, 32));
    EXPECT_THROW(w.add_frames(gradient_clip(1, 16, 30)), h3::Error);
  }
  EXPECT_TRUE(no_file_like(out));
  // A finished file is kept; finishing twice is refused.
  {
    h3::Mp4Writer w(out.string(), spec);
    w.add_frames(gradient_clip(3, 16, 32));
    w.finish();
    EXPECT_THROW(w.finish(), h3::Error);
    EXPECT_THROW(w.add_frames(gradient_clip(1, 16, 32)), h3::Error);
  }
  EXPECT_TRUE(fs::exists(out));
}

// libx264's held frames (MediaSpec's x264_* fields, the MP4's tail after the last frame): the delayed frames counted at
// the flush follow the look-ahead asked for, the sync look-ahead's buffer changes the threading and not one byte of
// the file, and values out of range are refused before a file exists.
TEST(Media, Mp4LookAheadSettingsSetTheHeldFramesAndSyncKeepsTheBytes) {
  ScratchDir dir;
  const Tensor clip = h3::test::clip_of(60, 48, 80, [](int64_t c, int64_t f, int64_t y, int64_t x) {
    return static_cast<float>(
        0.5 + 0.3 * std::sin(0.21 * static_cast<double>(x + 3 * f) + 0.17 * static_cast<double>(y) + c));
  });
  auto write = [&](const std::string& name, int lookahead, int sync, int threads) {
    h3::MediaSpec spec;
    spec.width = 80;
    spec.height = 48;
    spec.channels = 0;
    spec.x264_lookahead = lookahead;
    spec.x264_sync_lookahead = sync;
    spec.x264_threads = threads;
    h3::Mp4Writer w((dir / name).string(), spec);
    w.add_frames(clip);
    w.finish_video();
    const int64_t delayed = w.finish_times().video_delayed;
    w.finish();
    return delayed;
  };
  auto bytes = [&](const std::string& name) {
    std::ifstream f(dir / name, std::ios::binary);
    return std::vector<char>(std::istreambuf_iterator<char>(f), {});
  };
  // One frame thread: libx264 holds max(B-frames, look-ahead) + 1 frames (medium: 3 B-frames, look-ahead 40).
  const int64_t preset = write("preset.mp4", -1, -1, 1), short_la = write("la10.mp4", 10, -1, 1);
  EXPECT_EQ(preset, 41);
  EXPECT_EQ(short_la, 11);
  // Two frame threads: one more held frame each, and the sync look-ahead (B-frames + 1 by default) on top.
  const int64_t sync_auto = write("sync-auto.mp4", -1, -1, 2), sync_0 = write("sync-0.mp4", -1, 0, 2);
  EXPECT_EQ(sync_auto, 46);
  EXPECT_EQ(sync_0, 42);
  const std::vector<char> a = bytes("sync-auto.mp4"), b = bytes("sync-0.mp4");
  EXPECT_GT(a.size(), 1000u);
  EXPECT_TRUE(a == b) << "the sync look-ahead changed the file (" << a.size() << " against " << b.size() << " bytes)";
  for (auto [la, sync, threads] : {std::tuple{-2, -1, 0}, {251, -1, 0}, {-1, -2, 0}, {-1, -1, -1}, {-1, -1, 129}}) {
    h3::MediaSpec spec;
    spec.width = 80;
    spec.height = 48;
    spec.x264_lookahead = la;
    spec.x264_sync_lookahead = sync;
    spec.x264_threads = threads;
    EXPECT_THROW(h3::Mp4Writer((dir / "bad.mp4").string(), spec), h3::Error) << la << " " << sync << " " << threads;
    EXPECT_TRUE(no_file_like(dir / "bad.mp4"));
  }
}

// ---- WAV and PNG
// -----------------------------------------------------------------------------------------------

TEST(Media, WavRoundTripThroughLibavformat) {
  ScratchDir dir;
  Tensor wave = stereo_tones(1000, 32000);
  wave.data<float>()[5] = 1.7f;  // clamped to full scale
  wave.data<float>()[6] = -1.0f;
  const fs::path out = dir / "a.wav";
  h3::write_wav(out.string(), wave, 32000);
  EXPECT_FALSE(fs::exists(out.string() + ".partial"));
  EXPECT_EQ(fs::file_size(out), 44u + 2u * 2u * 1000u);
  const Decoded d = decode_file(out.string(), "wav");
  ASSERT_TRUE(d.ok) << d.error;
  EXPECT_EQ(d.acodec, "pcm_s16le");
  EXPECT_EQ(d.channels, 2);
  EXPECT_EQ(d.sample_rate, 32000);
  ASSERT_EQ(d.audio[0].size(), 1000u);
  double worst = 0;
  for (int c = 0; c < 2; ++c)
    for (int64_t i = 0; i < 1000; ++i) {
      const double ref = std::clamp(static_cast<double>(wave.data<float>()[c * 1000 + i]), -1.0, 1.0);
      // The reader scales by 1/32768, the writer by 32767: compare on the writer's scale.
      const double got = d.audio[static_cast<size_t>(c)][static_cast<size_t>(i)] * 32768.0 / 32767.0;
      worst = std::max(worst, std::abs(got - ref));
    }
  EXPECT_LE(worst, 0.5 / 32767 + 1e-6);

  EXPECT_THROW(h3::write_wav((dir / "missing/a.wav").string(), wave, 32000), h3::Error);
  EXPECT_THROW(h3::write_wav((dir / "b.wav").string(), Tensor(h3::DType::f32, {2, 3, 4}), 32000), h3::Error);
  EXPECT_TRUE(no_file_like(dir / "b.wav"));
}

TEST(Media, PngFramesRoundTrip) {
  ScratchDir dir;
  const int64_t T = 3, H = 10, W = 14;  // odd-ish sizes are fine for RGB
  Tensor pixels = gradient_clip(T, H, W);
  pixels.data<float>()[0] = -0.2f;  // clamped
  pixels.data<float>()[1] = 1.3f;
  const auto paths = h3::write_png_frames((dir / "frames").string(), pixels);
  ASSERT_EQ(paths.size(), static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    ASSERT_TRUE(fs::exists(paths[static_cast<size_t>(t)]));
    const Decoded d = decode_file(paths[static_cast<size_t>(t)]);
    ASSERT_TRUE(d.ok) << d.error;
    EXPECT_EQ(d.vcodec, "png");
    ASSERT_EQ(d.rgb.size(), 1u);
    ASSERT_EQ(d.width, W);
    ASSERT_EQ(d.height, H);
    double worst = 0;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < 3; ++c) {
          const double ref = std::clamp(pixels.get(((c * T + t) * H + y) * W + x), 0.0, 1.0) * 255.0;
          worst = std::max(worst, std::abs(d.rgb[0][static_cast<size_t>((y * W + x) * 3 + c)] - ref));
        }
    EXPECT_LE(worst, 0.5 + 1e-3) << "frame " << t;
  }
  // A printf pattern.
  const auto named = h3::write_png_frames((dir / "img_%03d.png").string(), pixels);
  ASSERT_EQ(named.size(), 3u);
  EXPECT_EQ(fs::path(named[2]).filename(), "img_002.png");
  EXPECT_THROW(h3::write_png_frames((dir / "img_%s.png").string(), pixels), h3::Error);
  EXPECT_THROW(h3::write_png_frames((dir / "x").string(), Tensor(h3::DType::f32, {4, 1, 2, 2})), h3::Error);
}

// ---- h3 decode
// -------------------------------------------------------------------------------------------------

TEST(Media, DecodeCommandReproducesTheGoldenPipelineMedia) {
  const auto file = h3::test::golden("pipeline-t2va-mini.safetensors");
  const auto vvae = h3::test::golden("video-vae-mini.safetensors");
  const auto avae = h3::test::golden("audio-vae-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  H3_REQUIRE_GOLDEN(vvae);
  H3_REQUIRE_GOLDEN(avae);
  const GoldenMedia g = golden_media(file);
  ScratchDir dir;
  const fs::path out = dir / "dec.mp4", wav = dir / "dec.wav", png = dir / "png";
  const CliResult r = run_h3("--log-level warn decode " + file + " -o " + out.string() + " --video-vae " + vvae +
                             " --audio-vae " + avae + " --wav " + wav.string() + " --png-dir " + png.string());
  ASSERT_EQ(r.status, 0) << r.out;
  std::printf("%s", r.out.c_str());
  const int64_t T = g.pixels.dim(1), H = g.pixels.dim(2), W = g.pixels.dim(3);

  // The PNG frames are the decoded pixels to 8 bits: within half a step (plus the f32 decode error) of the
  // reference's pixels.
  double worst = 0;
  int64_t frames = 0;
  for (int64_t t = 0; t < T; ++t) {
    char name[64];
    std::snprintf(name, sizeof(name), "frame_%05lld.png", static_cast<long long>(t));
    const Decoded d = decode_file((png / name).string());
    ASSERT_TRUE(d.ok && d.rgb.size() == 1) << name;
    ++frames;
    for (int64_t y = 0; y < H; ++y)
      for (int64_t x = 0; x < W; ++x)
        for (int64_t c = 0; c < 3; ++c)
          worst = std::max(worst, std::abs(d.rgb[0][static_cast<size_t>((y * W + x) * 3 + c)] -
                                           g.pixels.get(((c * T + t) * H + y) * W + x) * 255.0));
  }
  EXPECT_EQ(frames, T);
  char past[64];
  std::snprintf(past, sizeof(past), "frame_%05lld.png", static_cast<long long>(T));
  EXPECT_FALSE(fs::exists(png / past)) << "more PNG frames than video frames";
  EXPECT_LE(worst, 0.5 + 0.01) << "decoded frames differ from the golden pixels";

  const Decoded a = decode_file(wav.string(), "wav");
  ASSERT_EQ(a.channels, 2);
  ASSERT_EQ(static_cast<int64_t>(a.audio[0].size()), g.wave.dim(1));
  double wworst = 0;
  for (int64_t c = 0; c < 2; ++c)
    for (int64_t i = 0; i < g.wave.dim(1); ++i)
      wworst = std::max(wworst, std::abs(a.audio[static_cast<size_t>(c)][static_cast<size_t>(i)] * 32768.0 / 32767.0 -
                                         g.wave.get(c * g.wave.dim(1) + i)));
  EXPECT_LE(wworst, 0.5 / 32767 + 1e-4) << "decoded waveform differs from the golden waveform";

  const Decoded m = decode_file(out.string());
  ASSERT_TRUE(m.ok);
  EXPECT_EQ(m.vcodec, "h264");
  EXPECT_EQ(m.acodec, "aac");
  EXPECT_EQ(static_cast<int64_t>(m.rgb.size()), T);
  EXPECT_EQ(m.width, W);
  EXPECT_EQ(m.height, H);
  EXPECT_NEAR(m.audio_duration, static_cast<double>(g.wave.dim(1)) / 32000.0, 1e-6);
  EXPECT_TRUE(m.metadata.count("comment"));
  EXPECT_TRUE(m.metadata.count("h3_decode"));
  EXPECT_EQ(m.metadata.count("h3_request"), 1u);  // the golden file's "info" (its request) travels along

  // Sharded over 2 ranks: the same frames, byte for byte (the sharded decode is bitwise the 1-rank decode).
  const fs::path png2 = dir / "png2";
  const CliResult r2 =
      run_h3("--log-level warn decode " + file + " -o " + (dir / "dec2.mp4").string() + " --video-vae " + vvae +
             " --audio-vae " + avae + " --png-dir " + png2.string() + " --ranks 2");
  ASSERT_EQ(r2.status, 0) << r2.out;
  auto bytes = [](const fs::path& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  for (int64_t t = 0; t < T; ++t) {
    char name[64];
    std::snprintf(name, sizeof(name), "frame_%05lld.png", static_cast<long long>(t));
    ASSERT_TRUE(fs::exists(png2 / name)) << name;
    EXPECT_EQ(bytes(png / name), bytes(png2 / name)) << name;
  }
}

TEST(Media, DecodeCommandErrorsExitNonZeroAndLeaveNothing) {
  const auto vvae = h3::test::golden("video-vae-mini.safetensors");
  H3_REQUIRE_GOLDEN(vvae);
  ScratchDir dir;
  const fs::path out = dir / "x.mp4";
  // Latents of the wrong rank, and with the wrong channel count.
  const fs::path bad_rank = dir / "bad_rank.safetensors", bad_ch = dir / "bad_ch.safetensors",
                 no_video = dir / "no_video.safetensors", good = dir / "good.safetensors";
  h3::write_safetensors(bad_rank.string(), {{"video_latents", Tensor(h3::DType::f32, {24, 3, 5})}});
  h3::write_safetensors(bad_ch.string(), {{"video_latents", Tensor(h3::DType::f32, {7, 2, 4, 4})}});
  h3::write_safetensors(no_video.string(), {{"something", Tensor(h3::DType::f32, {2, 2})}});
  const fs::path short_t = dir / "short.safetensors";
  h3::write_safetensors(short_t.string(), {{"video_latents", Tensor(h3::DType::f32, {24, 2, 4, 4})}});
  h3::write_safetensors(good.string(), {{"video_latents", Tensor(h3::DType::f32, {24, 7, 4, 4})},
                                        {"audio_latent_rows", Tensor(h3::DType::f32, {7, 32})}});
  struct Case {
    std::string args, expect;
  };
  const std::vector<Case> cases = {
      {bad_rank.string() + " -o " + out.string(), "[C, T, h, w]"},
      {bad_ch.string() + " -o " + out.string(), "channels"},
      {no_video.string() + " -o " + out.string(), "video_latents"},
      {good.string() + " -o " + out.string(), "[2A, C]"},  // 7 audio rows: not two channels
      // Fails inside the decode, after the MP4 was opened: its partial file must go.
      {short_t.string() + " -o " + out.string(), "temporal chunk"},
      {good.string() + " --no-audio -o " + (dir / "missing" / "x.mp4").string(), "does not exist"},
      {good.string() + " --no-audio -o " + dir.path().string(), "is a folder"},
  };
  for (const auto& c : cases) {
    const CliResult r = run_h3("--log-level warn decode " + c.args + " --video-vae " + vvae);
    EXPECT_NE(r.status, 0) << c.args << "\n" << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.args << "\n" << r.out;
    EXPECT_TRUE(no_file_like(out)) << c.args;
    EXPECT_FALSE(fs::exists(dir / "missing")) << c.args;
  }
  // The good video latents decode (no audio): a video-only MP4, 4x upsampled (16 x 16), 7 latent frames
  // -> 22.
  const CliResult ok =
      run_h3("--log-level warn decode " + good.string() + " --no-audio -o " + out.string() + " --video-vae " + vvae);
  ASSERT_EQ(ok.status, 0) << ok.out;
  const Decoded d = decode_file(out.string());
  EXPECT_EQ(d.acodec, "");
  EXPECT_EQ(d.width, 16);
  EXPECT_EQ(d.height, 16);
  EXPECT_EQ(d.rgb.size(), 22u);
  // --wav without audio latents: refused before anything is written.
  const fs::path out2 = dir / "y.mp4";
  const CliResult nowav = run_h3("--log-level warn decode " + good.string() + " --no-audio -o " + out2.string() +
                                 " --video-vae " + vvae + " --wav " + (dir / "y.wav").string());
  EXPECT_NE(nowav.status, 0) << nowav.out;
  EXPECT_TRUE(no_file_like(out2));
  EXPECT_TRUE(no_file_like(dir / "y.wav"));
}

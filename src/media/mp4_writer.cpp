// MP4 through libavformat: H.264 from libx264 and AAC from libavcodec's native encoder, muxed with
// +faststart.
//
// Colour: the float RGB pixels become 8-bit yuv420p here (not in swscale) so that the matrix, the range and
// the chroma siting written in the stream's colour tags are exactly the ones used:
//   BT.709, limited range, R, G, B in [0, 1]:  Y' = 0.2126 R + 0.7152 G + 0.0722 B,
//   Y = 16 + 219 Y',  Cb = 128 + 224 (B - Y') / 1.8556,  Cr = 128 + 224 (R - Y') / 1.5748;
//   chroma "left" siting (H.264's default): Cb[j][i] = sum over rows 2j, 2j+1 and columns 2i-1, 2i, 2i+1
//   (weights 1/8, 1/4, 1/8 per row, edge columns repeated) of the full-resolution Cb.
// Audio: planar f32 samples are queued in an AVAudioFifo and cut into the encoder's frame size (1024 for
// AAC); libswresample converts the sample format only when the encoder does not take planar f32 (the native
// "aac" encoder does). The sample rate is never changed: the wave must be at MediaSpec::sample_rate.
#include "media/mp4_writer.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/audio_fifo.h>
#include <libavutil/channel_layout.h>
#include <libavutil/log.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
}

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <mutex>

#include "core/log.h"
#include "core/parallel.h"
#include "media/media_util.h"

namespace h3 {

using media::av_error_text;

namespace {

// libav's own log lines (x264's banner and statistics) only at debug level.
void quiet_libav_logs() {
  static std::once_flag once;
  std::call_once(once,
                 [] { av_log_set_level(spdlog::get_level() <= spdlog::level::debug ? AV_LOG_INFO : AV_LOG_ERROR); });
}

constexpr float kKr = 0.2126f, kKb = 0.0722f, kKg = 1.0f - kKr - kKb;

uint8_t to_u8(float v) {
  return static_cast<uint8_t>(std::lround(std::min(255.0f, std::max(0.0f, v))));
}

}  // namespace

struct Mp4Writer::Impl {
  MediaSpec spec;
  media::PartialFile file;
  AVFormatContext* oc = nullptr;
  AVCodecContext* venc = nullptr;
  AVCodecContext* aenc = nullptr;
  AVStream* vst = nullptr;
  AVStream* ast = nullptr;
  AVFrame* vframe = nullptr;
  AVFrame* aframe = nullptr;
  AVFrame* aconv = nullptr;  // the sample-format-converted frame (only with swr)
  AVPacket* vpkt = nullptr;  // one packet per encoder: the video and the audio may be encoded on two threads
  AVPacket* apkt = nullptr;
  std::mutex mux;  // the muxer (oc), shared by the two
  AVAudioFifo* fifo = nullptr;
  SwrContext* swr = nullptr;
  bool io_open = false, finished = false, video_done = false;
  std::atomic<bool> broken = false;  // set by either thread
  int64_t frames = 0, samples_in = 0, samples_out = 0;
  std::vector<float> cb, cr;  // full-resolution chroma of one frame
  int64_t video_packets = 0;  // written by drain() (the video thread's alone)
  FinishTimes finish_times;

  Impl(const std::string& path, const MediaSpec& s) : spec(s), file(path) {}
  ~Impl() {
    avcodec_free_context(&venc);
    avcodec_free_context(&aenc);
    av_frame_free(&vframe);
    av_frame_free(&aframe);
    av_frame_free(&aconv);
    av_packet_free(&vpkt);
    av_packet_free(&apkt);
    if (fifo) av_audio_fifo_free(fifo);
    swr_free(&swr);
    if (oc && io_open) avio_closep(&oc->pb);
    avformat_free_context(oc);
    // `file` removes the partial file unless finish() committed it.
  }

  const std::string& where() const { return file.final_path(); }

  void open();
  void open_video();
  void open_audio();
  void drain(AVCodecContext* enc, AVStream* st, AVPacket* pkt);
  void send(AVCodecContext* enc, AVStream* st, AVPacket* pkt, AVFrame* frame);
  void flush_video();
  void encode_frame_yuv(const media::PixelView& v, int64_t t);
  void encode_audio_frame(int n);
};

void Mp4Writer::Impl::open() {
  quiet_libav_logs();
  const std::string& p = where();
  media::check_output_path(p, "mp4");
  H3_CHECK(spec.width > 0 && spec.height > 0 && spec.width % 2 == 0 && spec.height % 2 == 0,
           "mp4 {}: width x height {} x {} must be positive and even (H.264 yuv420p halves the chroma); crop or "
           "pad the frames to even sizes",
           p, spec.width, spec.height);
  H3_CHECK(spec.fps >= 1 && spec.fps <= 1000, "mp4 {}: fps {} out of range 1..1000", p, spec.fps);
  H3_CHECK(spec.channels >= 0 && spec.channels <= 8, "mp4 {}: {} audio channels (0 = no audio track, up to 8)", p,
           spec.channels);
  H3_CHECK(spec.channels == 0 || spec.sample_rate > 0, "mp4 {}: sample rate {} must be positive", p, spec.sample_rate);
  H3_CHECK(spec.crf >= 0 && spec.crf <= 51, "mp4 {}: crf {} out of range 0..51", p, spec.crf);

  int ret = avformat_alloc_output_context2(&oc, nullptr, "mp4", file.partial().c_str());
  H3_CHECK(ret >= 0 && oc, "mp4 {}: libavformat has no mp4 muxer ({}); install libavformat with mp4 support", p,
           av_error_text(ret));
  vpkt = av_packet_alloc();
  apkt = av_packet_alloc();
  H3_CHECK(vpkt && apkt, "mp4 {}: out of memory", p);
  open_video();
  if (spec.channels > 0) open_audio();
  for (const auto& [k, v] : spec.metadata) av_dict_set(&oc->metadata, k.c_str(), v.c_str(), 0);

  ret = avio_open(&oc->pb, file.partial().c_str(), AVIO_FLAG_WRITE);
  if (ret < 0)
    fail("mp4 {}: cannot create {}: {}; check that the folder exists and is writable", p, file.partial(),
         av_error_text(ret));
  io_open = true;
  // faststart: the moov atom is moved in front of mdat when the trailer is written; use_metadata_tags keeps
  // every metadata key (not only the few iTunes names mp4 knows).
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "movflags", "+faststart+use_metadata_tags", 0);
  // Edit lists and durations in 1/96000 s (a multiple of 24 fps and of 32 and 48 kHz) instead of the default
  // 1/1000 s, so that the audio track's length is exact (520 samples at 32 kHz is 16.25 ms, not 17).
  av_dict_set(&opts, "movie_timescale", "96000", 0);
  // Packets leave libavformat's interleaving queue only when every stream has one there, so they reach mdat in
  // timestamp order whatever the order (or the threads) they were written in. The default (10 s) let a clip over
  // 10 s, whose audio comes after all of its video, write its first seconds of video alone; the queue holds at most
  // the clip's packets (~30 MB for 15 s at 768p).
  oc->max_interleave_delta = 0;
  ret = avformat_write_header(oc, &opts);
  const bool unused = av_dict_count(opts) > 0;
  av_dict_free(&opts);
  if (ret < 0) fail("mp4 {}: writing the header failed: {}", p, av_error_text(ret));
  H3_CHECK(!unused, "mp4 {}: this libavformat ({}) does not know the movflags/movie_timescale options", p,
           av_version_info());
}

void Mp4Writer::Impl::open_video() {
  const std::string& p = where();
  const AVCodec* codec = avcodec_find_encoder_by_name("libx264");
  H3_CHECK(codec,
           "mp4 {}: this libavcodec (version {}) was built without the libx264 encoder; install a libavcodec "
           "built with libx264 (Debian's libavcodec59 is) or write --png-dir frames instead",
           p, av_version_info());
  venc = avcodec_alloc_context3(codec);
  H3_CHECK(venc, "mp4 {}: out of memory", p);
  venc->width = static_cast<int>(spec.width);
  venc->height = static_cast<int>(spec.height);
  venc->pix_fmt = AV_PIX_FMT_YUV420P;
  venc->time_base = AVRational{1, spec.fps};
  venc->framerate = AVRational{spec.fps, 1};
  venc->sample_aspect_ratio = AVRational{1, 1};
  venc->color_range = AVCOL_RANGE_MPEG;
  venc->colorspace = AVCOL_SPC_BT709;
  venc->color_primaries = AVCOL_PRI_BT709;
  venc->color_trc = AVCOL_TRC_BT709;
  venc->chroma_sample_location = AVCHROMA_LOC_LEFT;
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) venc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  H3_CHECK(spec.x264_lookahead >= -1 && spec.x264_lookahead <= 250 && spec.x264_sync_lookahead >= -1 &&
               spec.x264_sync_lookahead <= 250 && spec.x264_threads >= 0 && spec.x264_threads <= 128,
           "mp4 {}: libx264 look-ahead {} / sync look-ahead {} (each -1 for libx264's, up to 250) or threads {} (0 for "
           "libx264's, up to 128) out of range",
           p, spec.x264_lookahead, spec.x264_sync_lookahead, spec.x264_threads);
  venc->thread_count = spec.x264_threads;
  AVDictionary* opts = nullptr;
  av_dict_set_int(&opts, "crf", spec.crf, 0);
  av_dict_set(&opts, "preset", spec.x264_preset.c_str(), 0);
  std::string params;
  if (spec.x264_lookahead >= 0) params += "rc-lookahead=" + std::to_string(spec.x264_lookahead);
  if (spec.x264_sync_lookahead >= 0)
    params += (params.empty() ? "" : ":") + std::string("sync-lookahead=") + std::to_string(spec.x264_sync_lookahead);
  if (!params.empty()) av_dict_set(&opts, "x264-params", params.c_str(), 0);
  int ret = avcodec_open2(venc, codec, &opts);
  const bool unused = av_dict_count(opts) > 0;
  av_dict_free(&opts);
  if (ret < 0)
    fail("mp4 {}: opening libx264 ({} x {}, {} fps, crf {}, preset '{}') failed: {}", p, spec.width, spec.height,
         spec.fps, spec.crf, spec.x264_preset, av_error_text(ret));
  H3_CHECK(!unused, "mp4 {}: libx264 did not take the crf/preset options", p);
  vst = avformat_new_stream(oc, nullptr);
  H3_CHECK(vst, "mp4 {}: out of memory", p);
  ret = avcodec_parameters_from_context(vst->codecpar, venc);
  H3_CHECK(ret >= 0, "mp4 {}: video stream parameters: {}", p, av_error_text(ret));
  vst->time_base = venc->time_base;
  vst->avg_frame_rate = venc->framerate;
  vframe = av_frame_alloc();
  H3_CHECK(vframe, "mp4 {}: out of memory", p);
  vframe->format = AV_PIX_FMT_YUV420P;
  vframe->width = venc->width;
  vframe->height = venc->height;
  vframe->color_range = venc->color_range;
  vframe->colorspace = venc->colorspace;
  vframe->color_primaries = venc->color_primaries;
  vframe->color_trc = venc->color_trc;
  vframe->chroma_location = venc->chroma_sample_location;
  ret = av_frame_get_buffer(vframe, 0);
  H3_CHECK(ret >= 0, "mp4 {}: frame buffer: {}", p, av_error_text(ret));
}

void Mp4Writer::Impl::open_audio() {
  const std::string& p = where();
  const AVCodec* codec = avcodec_find_encoder_by_name("aac");
  H3_CHECK(codec, "mp4 {}: this libavcodec (version {}) has no native 'aac' encoder; install a full libavcodec", p,
           av_version_info());
  if (codec->supported_samplerates) {
    bool ok = false;
    for (const int* r = codec->supported_samplerates; *r; ++r) ok |= *r == spec.sample_rate;
    H3_CHECK(ok, "mp4 {}: the aac encoder does not take {} Hz; resample the wave to 32000 or 48000 Hz", p,
             spec.sample_rate);
  }
  aenc = avcodec_alloc_context3(codec);
  H3_CHECK(aenc, "mp4 {}: out of memory", p);
  aenc->sample_fmt = codec->sample_fmts ? codec->sample_fmts[0] : AV_SAMPLE_FMT_FLTP;
  aenc->sample_rate = spec.sample_rate;
  av_channel_layout_default(&aenc->ch_layout, spec.channels);
  aenc->bit_rate = spec.audio_bitrate;
  aenc->time_base = AVRational{1, spec.sample_rate};
  if (oc->oformat->flags & AVFMT_GLOBALHEADER) aenc->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  // The "fast" coder without perceptual noise substitution: the default twoloop coder with PNS replaced the
  // onset of a test tone (samples 384..768 of the first frame) by noise, up to 0.66 off on a 0.5 sine, and
  // coded the two channels of a mono signal differently there; "fast" without PNS stays within 1e-3 (notes.md
  // has the numbers).
  AVDictionary* opts = nullptr;
  av_dict_set(&opts, "aac_coder", "fast", 0);
  av_dict_set(&opts, "aac_pns", "0", 0);
  int ret = avcodec_open2(aenc, codec, &opts);
  const bool unused = av_dict_count(opts) > 0;
  av_dict_free(&opts);
  H3_CHECK(ret < 0 || !unused, "mp4 {}: the aac encoder did not take the aac_coder/aac_pns options", p);
  if (ret < 0)
    fail("mp4 {}: opening the aac encoder ({} Hz, {} channels, {} b/s) failed: {}", p, spec.sample_rate, spec.channels,
         spec.audio_bitrate, av_error_text(ret));
  ast = avformat_new_stream(oc, nullptr);
  H3_CHECK(ast, "mp4 {}: out of memory", p);
  ret = avcodec_parameters_from_context(ast->codecpar, aenc);
  H3_CHECK(ret >= 0, "mp4 {}: audio stream parameters: {}", p, av_error_text(ret));
  ast->time_base = aenc->time_base;

  const int frame_size = aenc->frame_size > 0 ? aenc->frame_size : 1024;
  fifo = av_audio_fifo_alloc(AV_SAMPLE_FMT_FLTP, spec.channels, frame_size);
  aframe = av_frame_alloc();
  H3_CHECK(fifo && aframe, "mp4 {}: out of memory", p);
  aframe->format = AV_SAMPLE_FMT_FLTP;
  aframe->sample_rate = spec.sample_rate;
  aframe->nb_samples = frame_size;
  ret = av_channel_layout_copy(&aframe->ch_layout, &aenc->ch_layout);
  H3_CHECK(ret >= 0, "mp4 {}: channel layout: {}", p, av_error_text(ret));
  ret = av_frame_get_buffer(aframe, 0);
  H3_CHECK(ret >= 0, "mp4 {}: audio frame buffer: {}", p, av_error_text(ret));
  if (aenc->sample_fmt != AV_SAMPLE_FMT_FLTP) {
    ret = swr_alloc_set_opts2(&swr, &aenc->ch_layout, aenc->sample_fmt, spec.sample_rate, &aenc->ch_layout,
                              AV_SAMPLE_FMT_FLTP, spec.sample_rate, 0, nullptr);
    H3_CHECK(ret >= 0 && swr && swr_init(swr) >= 0, "mp4 {}: libswresample cannot convert fltp to {}", p,
             av_get_sample_fmt_name(aenc->sample_fmt));
    aconv = av_frame_alloc();
    H3_CHECK(aconv, "mp4 {}: out of memory", p);
  }
}

void Mp4Writer::Impl::drain(AVCodecContext* enc, AVStream* st, AVPacket* pkt) {
  for (;;) {
    int ret = avcodec_receive_packet(enc, pkt);
    if (ret == AVERROR(EAGAIN) || ret == AVERROR_EOF) return;
    if (ret < 0) fail("mp4 {}: {} encoder failed: {}", where(), enc->codec->name, av_error_text(ret));
    av_packet_rescale_ts(pkt, enc->time_base, st->time_base);
    pkt->stream_index = st->index;
    {
      std::lock_guard lock(mux);
      ret = av_interleaved_write_frame(oc, pkt);
    }
    if (enc == venc) ++video_packets;
    if (ret < 0)
      fail("mp4 {}: writing to {} failed: {}; is the disk full?", where(), file.partial(), av_error_text(ret));
  }
}

void Mp4Writer::Impl::send(AVCodecContext* enc, AVStream* st, AVPacket* pkt, AVFrame* frame) {
  int ret = avcodec_send_frame(enc, frame);
  if (ret < 0) fail("mp4 {}: {} encoder refused a frame: {}", where(), enc->codec->name, av_error_text(ret));
  drain(enc, st, pkt);
}

void Mp4Writer::Impl::flush_video() {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t before = video_packets;
  send(venc, vst, vpkt, nullptr);
  video_done = true;
  finish_times.video_delayed = video_packets - before;
  finish_times.video_flush = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void Mp4Writer::Impl::encode_frame_yuv(const media::PixelView& v, int64_t t) {
  int ret = av_frame_make_writable(vframe);
  H3_CHECK(ret >= 0, "mp4 {}: frame buffer: {}", where(), av_error_text(ret));
  const int64_t H = v.height, W = v.width;
  cb.resize(static_cast<size_t>(H * W));
  cr.resize(static_cast<size_t>(H * W));
  // Rows in parallel (each row's values depend on that row alone, so the bytes do not depend on the split): the
  // conversion of a 832 x 480 frame on one thread took longer than libx264's frame-threaded encode of it.
  constexpr int64_t kRows = 16;
  parallel_for(
      H,
      [&](int64_t y0, int64_t y1) {
        for (int64_t y = y0; y < y1; ++y) {
          uint8_t* yrow = vframe->data[0] + y * vframe->linesize[0];
          for (int64_t x = 0; x < W; ++x) {
            const float r = v.at(0, t, y, x), g = v.at(1, t, y, x), b = v.at(2, t, y, x);
            const float luma = kKr * r + kKg * g + kKb * b;
            yrow[x] = to_u8(16.0f + 219.0f * luma);
            cb[static_cast<size_t>(y * W + x)] = (b - luma) / (2.0f * (1.0f - kKb));
            cr[static_cast<size_t>(y * W + x)] = (r - luma) / (2.0f * (1.0f - kKr));
          }
        }
      },
      kRows);
  parallel_for(
      H / 2,
      [&](int64_t j0, int64_t j1) {
        for (int64_t j = j0; j < j1; ++j) {
          uint8_t* urow = vframe->data[1] + j * vframe->linesize[1];
          uint8_t* vrow = vframe->data[2] + j * vframe->linesize[2];
          for (int64_t i = 0; i < W / 2; ++i) {
            const int64_t xs[3] = {std::max<int64_t>(2 * i - 1, 0), 2 * i, 2 * i + 1};
            const float wt[3] = {0.125f, 0.25f, 0.125f};
            float su = 0, sv = 0;
            for (int64_t y = 2 * j; y <= 2 * j + 1; ++y)
              for (int k = 0; k < 3; ++k) {
                su += wt[k] * cb[static_cast<size_t>(y * W + xs[k])];
                sv += wt[k] * cr[static_cast<size_t>(y * W + xs[k])];
              }
            urow[i] = to_u8(128.0f + 224.0f * su);
            vrow[i] = to_u8(128.0f + 224.0f * sv);
          }
        }
      },
      kRows / 2);
  vframe->pts = frames;
  send(venc, vst, vpkt, vframe);
  ++frames;
}

void Mp4Writer::Impl::encode_audio_frame(int n) {
  int ret = av_frame_make_writable(aframe);
  H3_CHECK(ret >= 0, "mp4 {}: audio frame buffer: {}", where(), av_error_text(ret));
  aframe->nb_samples = aenc->frame_size > 0 ? aenc->frame_size : n;
  const int got = av_audio_fifo_read(fifo, reinterpret_cast<void**>(aframe->data), n);
  H3_CHECK(got == n, "mp4 {}: audio queue returned {} of {} samples", where(), got, n);
  if (n < aframe->nb_samples) {
    // The last, short frame: trimmed when the encoder allows it, padded with silence otherwise.
    if (aenc->codec->capabilities & (AV_CODEC_CAP_SMALL_LAST_FRAME | AV_CODEC_CAP_VARIABLE_FRAME_SIZE)) {
      aframe->nb_samples = n;
    } else {
      for (int c = 0; c < spec.channels; ++c)
        std::fill(reinterpret_cast<float*>(aframe->data[c]) + n,
                  reinterpret_cast<float*>(aframe->data[c]) + aframe->nb_samples, 0.0f);
    }
  }
  aframe->pts = samples_out;
  samples_out += aframe->nb_samples;
  if (!swr) {
    send(aenc, ast, apkt, aframe);
    return;
  }
  av_frame_unref(aconv);
  aconv->format = aenc->sample_fmt;
  aconv->sample_rate = spec.sample_rate;
  aconv->nb_samples = aframe->nb_samples;
  ret = av_channel_layout_copy(&aconv->ch_layout, &aenc->ch_layout);
  H3_CHECK(ret >= 0, "mp4 {}: channel layout: {}", where(), av_error_text(ret));
  ret = swr_convert_frame(swr, aconv, aframe);
  H3_CHECK(ret >= 0, "mp4 {}: libswresample: {}", where(), av_error_text(ret));
  aconv->pts = aframe->pts;
  send(aenc, ast, apkt, aconv);
}

Mp4Writer::Mp4Writer(const std::string& path, const MediaSpec& spec)
    : path_(path), impl_(std::make_unique<Impl>(path, spec)) {
  impl_->open();
}

Mp4Writer::~Mp4Writer() = default;

int64_t Mp4Writer::frames_written() const {
  return impl_->frames;
}
int64_t Mp4Writer::samples_written() const {
  return impl_->samples_in;
}
const Mp4Writer::FinishTimes& Mp4Writer::finish_times() const {
  return impl_->finish_times;
}

bool Mp4Writer::add_frames(const Tensor& pixels, const std::function<bool()>& stop) {
  Impl& m = *impl_;
  H3_CHECK(!m.finished && !m.video_done, "mp4 {}: add_frames() after finish_video() or finish()", path_);
  H3_CHECK(!m.broken, "mp4 {}: an earlier error left this writer unusable; start a new one", path_);
  const media::PixelView v = media::pixel_view(pixels, "mp4 " + path_);
  H3_CHECK(v.height == m.spec.height && v.width == m.spec.width,
           "mp4 {}: frames are {} x {} (H x W) but the file was opened for {} x {}; pixels must be [3, T, H, W]", path_,
           v.height, v.width, m.spec.height, m.spec.width);
  try {
    for (int64_t t = 0; t < v.frames; ++t) {
      if (stop && stop()) {
        m.broken = true;
        return false;
      }
      m.encode_frame_yuv(v, t);
    }
  } catch (...) {
    m.broken = true;
    throw;
  }
  return true;
}

void Mp4Writer::finish_video() {
  Impl& m = *impl_;
  H3_CHECK(!m.finished && !m.video_done, "mp4 {}: finish_video() after finish() or twice", path_);
  H3_CHECK(!m.broken, "mp4 {}: an earlier error left this writer unusable; start a new one", path_);
  H3_CHECK(m.frames > 0, "mp4 {}: no video frames were added; an MP4 needs at least one frame", path_);
  try {
    m.flush_video();
  } catch (...) {
    m.broken = true;
    throw;
  }
}

void Mp4Writer::add_audio(const Tensor& wave) {
  Impl& m = *impl_;
  H3_CHECK(!m.finished, "mp4 {}: add_audio() after finish()", path_);
  H3_CHECK(!m.broken, "mp4 {}: an earlier error left this writer unusable; start a new one", path_);
  H3_CHECK(m.spec.channels > 0, "mp4 {}: the file was opened without audio (channels = 0)", path_);
  const media::WaveView v = media::wave_view(wave, "mp4 " + path_);
  H3_CHECK(v.channels == m.spec.channels || v.channels == 1,
           "mp4 {}: wave has {} channels but the file was opened for {}; wave must be [channels, N]", path_, v.channels,
           m.spec.channels);
  try {
    const int frame_size = m.aenc->frame_size > 0 ? m.aenc->frame_size : 1024;
    constexpr int64_t kChunk = 8192;
    std::vector<std::vector<float>> planes(static_cast<size_t>(m.spec.channels));
    std::vector<void*> ptrs(planes.size());
    for (int64_t s0 = 0; s0 < v.samples; s0 += kChunk) {
      const int64_t n = std::min(kChunk, v.samples - s0);
      for (size_t c = 0; c < planes.size(); ++c) {
        planes[c].resize(static_cast<size_t>(n));
        const int64_t src = v.channels == 1 ? 0 : static_cast<int64_t>(c);  // mono goes to every channel
        for (int64_t i = 0; i < n; ++i) planes[c][static_cast<size_t>(i)] = v.at(src, s0 + i);
        ptrs[c] = planes[c].data();
      }
      const int w = av_audio_fifo_write(m.fifo, ptrs.data(), static_cast<int>(n));
      H3_CHECK(w == n, "mp4 {}: audio queue: {}", path_, av_error_text(w));
      m.samples_in += n;
      while (av_audio_fifo_size(m.fifo) >= frame_size) m.encode_audio_frame(frame_size);
    }
  } catch (...) {
    m.broken = true;
    throw;
  }
}

void Mp4Writer::finish() {
  Impl& m = *impl_;
  H3_CHECK(!m.finished, "mp4 {}: finish() called twice", path_);
  H3_CHECK(!m.broken, "mp4 {}: an earlier error left this writer unusable; nothing was written", path_);
  try {
    H3_CHECK(m.frames > 0, "mp4 {}: no video frames were added; an MP4 needs at least one frame", path_);
    if (!m.video_done) m.flush_video();
    using clock = std::chrono::steady_clock;
    auto since = [](clock::time_point t) { return std::chrono::duration<double>(clock::now() - t).count(); };
    auto t0 = clock::now();
    if (m.aenc) {
      if (av_audio_fifo_size(m.fifo) > 0) m.encode_audio_frame(av_audio_fifo_size(m.fifo));
      m.send(m.aenc, m.ast, m.apkt, nullptr);
    }
    m.finish_times.audio = since(t0);
    t0 = clock::now();
    int ret = av_write_trailer(m.oc);
    if (ret < 0) fail("mp4 {}: writing the trailer (moov, faststart) failed: {}", path_, av_error_text(ret));
    ret = avio_closep(&m.oc->pb);
    m.io_open = false;
    if (ret < 0) fail("mp4 {}: closing {} failed: {}; is the disk full?", path_, m.file.partial(), av_error_text(ret));
    m.file.commit();
    m.finish_times.trailer = since(t0);
    m.finished = true;
  } catch (...) {
    m.broken = true;
    throw;
  }
}

std::string media_library_versions() {
  auto v = [](const char* name, unsigned version) {
    return fmt::format("{} {}.{}.{}", name, AV_VERSION_MAJOR(version), AV_VERSION_MINOR(version),
                       AV_VERSION_MICRO(version));
  };
  std::string s = v("libavcodec", avcodec_version()) + ", " + v("libavformat", avformat_version()) + ", " +
                  v("libavutil", avutil_version()) + ", " + v("libswresample", swresample_version());
  s += avcodec_find_encoder_by_name("libx264") ? ", H.264 by libx264" : ", no libx264 (MP4 output will fail)";
  return s;
}

}  // namespace h3

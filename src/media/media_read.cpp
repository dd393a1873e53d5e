// Media input (media/media_read.h): one demux + decode loop feeds either counters (scan_media) or tensors
// (read_picture, read_video_frames, read_audio), so the geometry a request is resolved with and the pixels it
// is run with come from the same frame-holding and resampling code.
#include "media/media_read.h"

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/channel_layout.h>
#include <libavutil/imgutils.h>
#include <libavutil/log.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
}

#include <algorithm>
#include <cmath>
#include <cstdarg>
#include <filesystem>
#include <functional>
#include <memory>
#include <mutex>

#include "core/files.h"
#include "core/log.h"
#include "media/media_util.h"

namespace h3 {

using media::av_error_text;

namespace {

// Errors libav logs while this thread decodes (a truncated JPEG is only reported through the log).
thread_local std::vector<std::string>* t_av_errors = nullptr;

void log_to_collector(void* avcl, int level, const char* fmt, va_list vl) {
  if (t_av_errors && level <= AV_LOG_ERROR) {
    char line[512];
    int prefix = 1;
    av_log_format_line(avcl, level, fmt, vl, line, sizeof(line), &prefix);
    std::string l(line);
    while (!l.empty() && (l.back() == '\n' || l.back() == '\r')) l.pop_back();
    if (t_av_errors->size() < 8) t_av_errors->push_back(l);
    return;
  }
  av_log_default_callback(avcl, level, fmt, vl);
}

void quiet_libav() {
  static std::once_flag once;
  std::call_once(once, [] {
    av_log_set_level(spdlog::get_level() <= spdlog::level::debug ? AV_LOG_INFO : AV_LOG_ERROR);
    av_log_set_callback(&log_to_collector);
  });
}

// Collects what libav logs as errors on this thread while alive.
class AvErrors {
 public:
  AvErrors() : prev_(t_av_errors) { t_av_errors = &errors_; }
  ~AvErrors() { t_av_errors = prev_; }
  AvErrors(const AvErrors&) = delete;
  AvErrors& operator=(const AvErrors&) = delete;
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  std::vector<std::string> errors_;
  std::vector<std::string>* prev_;
};

void check_picture_size(const std::string& path, int64_t w, int64_t h, const char* how) {
  H3_CHECK(w > 0 && h > 0, "{}: {} a picture of {}x{} pixels; the file is damaged", path, how, w, h);
  H3_CHECK(w <= kMaxMediaSide && h <= kMaxMediaSide && w * h <= kMaxMediaPixels,
           "{}: {} {}x{} pixels; at most {} a side and {} in all are read (scale it down first)", path, how, w, h,
           kMaxMediaSide, kMaxMediaPixels);
}

void check_audio_format(const std::string& path, int64_t rate, int64_t channels, const char* how) {
  H3_CHECK(rate >= kMinSampleRate && rate <= kMaxSampleRate,
           "{}: {} audio at {} Hz; sample rates {} .. {} Hz are read (resample it first)", path, how, rate,
           kMinSampleRate, kMaxSampleRate);
  H3_CHECK(channels >= 1 && channels <= kMaxAudioChannels, "{}: {} {} audio channels; 1 .. {} are read", path, how,
           channels, kMaxAudioChannels);
}

struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;

// An opened file with decoders for its best video and audio streams (either may be absent).
class Demuxer {
 public:
  Demuxer(const std::string& path, bool want_video, bool want_audio) : path_(path) {
    quiet_libav();
    namespace fs = std::filesystem;
    H3_CHECK(fs::exists(path), "media file {} does not exist: check the path", path);
    H3_CHECK(!fs::is_directory(path), "media file {} is a folder: give an image, video or audio file", path);
    check_input_file(path, "media file");  // a FIFO would block the open forever, a device be read without end
    int ret = avformat_open_input(&fc_, path.c_str(), nullptr, nullptr);
    H3_CHECK(ret >= 0, "cannot open {} as media ({}): give a PNG/JPEG/WebP image, a video or an audio file", path,
             av_error_text(ret));
    ret = avformat_find_stream_info(fc_, nullptr);
    H3_CHECK(ret >= 0, "{}: cannot read its stream information ({}); is the file complete?", path, av_error_text(ret));
    const std::string fmt_name = format();
    image_ = fmt_name == "image2" || fmt_name.ends_with("_pipe");
    if (fc_->duration != AV_NOPTS_VALUE && fc_->duration > 0)
      H3_CHECK(static_cast<double>(fc_->duration) / AV_TIME_BASE <= kMaxMediaSeconds,
               "{}: declares {:.0f} s; at most {:.0f} s of media are read", path,
               static_cast<double>(fc_->duration) / AV_TIME_BASE, kMaxMediaSeconds);
    if (want_video) vidx_ = open_decoder(AVMEDIA_TYPE_VIDEO, &vdec_);
    if (want_audio) aidx_ = open_decoder(AVMEDIA_TYPE_AUDIO, &adec_);
  }
  ~Demuxer() {
    avcodec_free_context(&vdec_);
    avcodec_free_context(&adec_);
    avformat_close_input(&fc_);
  }
  Demuxer(const Demuxer&) = delete;
  Demuxer& operator=(const Demuxer&) = delete;

  bool has_video() const { return vidx_ >= 0; }
  bool has_audio() const { return aidx_ >= 0; }
  AVStream* video_stream() const { return fc_->streams[vidx_]; }
  AVCodecContext* vdec() const { return vdec_; }
  AVCodecContext* adec() const { return adec_; }
  std::string format() const { return fc_->iformat ? fc_->iformat->name : "?"; }
  // An image file (one picture by its format), decoded strictly: any damage is an error.
  bool image() const { return image_; }
  // Damage the decoders reported (frames flagged corrupt, errors logged while decoding).
  const std::vector<std::string>& damage() const { return damage_; }

  // Decodes every packet of the opened streams in file order; a callback returning false stops that stream.
  void run(const std::function<bool(AVFrame*)>& on_video, const std::function<bool(AVFrame*)>& on_audio) {
    AVPacket* pkt = av_packet_alloc();
    FramePtr frame(av_frame_alloc());
    H3_CHECK(pkt && frame, "{}: out of memory allocating a decode frame", path_);
    bool video_on = has_video() && on_video, audio_on = has_audio() && on_audio;
    AvErrors logged;
    int64_t video_frames = 0;
    auto drain = [&](AVCodecContext* dec, bool& on, const std::function<bool(AVFrame*)>& cb) {
      while (on) {
        const int r = avcodec_receive_frame(dec, frame.get());
        if (r == AVERROR(EAGAIN) || r == AVERROR_EOF) return;
        H3_CHECK(r >= 0, "{}: decoding failed ({}); the file may be damaged", path_, av_error_text(r));
        AVFrame* f = frame.get();
        if (f->decode_error_flags || (f->flags & AV_FRAME_FLAG_CORRUPT)) note_damage("a frame decoded with errors");
        for (const auto& e : logged.errors()) note_damage(e);
        if (dec == vdec_) {
          check_picture_size(path_, f->width, f->height, "holds");
          H3_CHECK(++video_frames <= kMaxScanSourceFrames,
                   "{}: more than {} video frames would have to be decoded; give a shorter or lower-rate video", path_,
                   kMaxScanSourceFrames);
        } else {
          check_audio_format(path_, f->sample_rate, f->ch_layout.nb_channels, "holds");
          H3_CHECK(f->nb_samples <= (1 << 20), "{}: an audio frame of {} samples; the file is damaged", path_,
                   f->nb_samples);
        }
        on = cb(f);
        av_frame_unref(frame.get());
      }
    };
    try {
      while (video_on || audio_on) {
        const int r = av_read_frame(fc_, pkt);
        if (r == AVERROR_EOF) break;
        H3_CHECK(r >= 0, "{}: reading failed ({}); the file may be damaged", path_, av_error_text(r));
        if (pkt->stream_index == vidx_ && video_on) {
          const int s = avcodec_send_packet(vdec_, pkt);
          if (s < 0 && s != AVERROR(EAGAIN)) note_damage("a packet the decoder refused (" + av_error_text(s) + ")");
          if (s >= 0 || s == AVERROR(EAGAIN)) drain(vdec_, video_on, on_video);
        } else if (pkt->stream_index == aidx_ && audio_on) {
          const int s = avcodec_send_packet(adec_, pkt);
          if (s < 0 && s != AVERROR(EAGAIN)) note_damage("a packet the decoder refused (" + av_error_text(s) + ")");
          if (s >= 0 || s == AVERROR(EAGAIN)) drain(adec_, audio_on, on_audio);
        }
        av_packet_unref(pkt);
      }
      if (video_on) {
        avcodec_send_packet(vdec_, nullptr);
        drain(vdec_, video_on, on_video);
      }
      if (audio_on) {
        avcodec_send_packet(adec_, nullptr);
        drain(adec_, audio_on, on_audio);
      }
      for (const auto& e : logged.errors()) note_damage(e);
    } catch (...) {
      av_packet_free(&pkt);
      throw;
    }
    av_packet_free(&pkt);
  }

 private:
  int open_decoder(AVMediaType type, AVCodecContext** dec) {
    const int idx = av_find_best_stream(fc_, type, -1, -1, nullptr, 0);
    if (idx < 0) return -1;
    AVStream* st = fc_->streams[idx];
    if (type == AVMEDIA_TYPE_VIDEO && (st->disposition & AV_DISPOSITION_ATTACHED_PIC) && fc_->nb_streams > 1) {
      // Cover art of an audio file is not a picture the user meant as a reference.
      bool other = false;
      for (unsigned i = 0; i < fc_->nb_streams; ++i)
        other |= static_cast<int>(i) != idx && fc_->streams[i]->codecpar->codec_type == AVMEDIA_TYPE_AUDIO;
      if (other) return -1;
    }
    const AVCodecParameters* par = st->codecpar;
    if (type == AVMEDIA_TYPE_VIDEO) {
      check_picture_size(path_, par->width, par->height, "declares");
      if (image_) {
        std::error_code ec;
        const auto bytes = static_cast<int64_t>(std::filesystem::file_size(path_, ec));
        const int64_t budget = std::max<int64_t>(kStillFloorPixels, kStillPixelsPerByte * (ec ? 0 : bytes));
        H3_CHECK(int64_t{par->width} * par->height <= budget,
                 "{}: a {}-byte picture declares {}x{} pixels, more than any image codec packs into so few bytes "
                 "(a decompression bomb?); re-encode it as PNG or JPEG",
                 path_, bytes, par->width, par->height);
      }
      for (const AVRational r : {st->avg_frame_rate, st->r_frame_rate})
        H3_CHECK(!(r.num > 0 && r.den > 0 && av_q2d(r) > kMaxFrameRate),
                 "{}: declares {:.0f} frames per second; at most {:.0f} are read", path_, av_q2d(r), kMaxFrameRate);
    } else {
      check_audio_format(path_, par->sample_rate, par->ch_layout.nb_channels, "declares");
    }
    const AVCodec* codec = avcodec_find_decoder(st->codecpar->codec_id);
    H3_CHECK(codec,
             "{}: this libavcodec has no decoder for its {} stream ({}); convert the file (e.g. to PNG / "
             "H.264 / WAV) or install a fuller FFmpeg",
             path_, av_get_media_type_string(type), avcodec_get_name(st->codecpar->codec_id));
    *dec = avcodec_alloc_context3(codec);
    H3_CHECK(*dec, "{}: out of memory allocating a decoder", path_);
    int ret = avcodec_parameters_to_context(*dec, st->codecpar);
    if (image_ && type == AVMEDIA_TYPE_VIDEO) {
      // One thread, so every error the decoder logs is seen (and stopped at) by this thread.
      (*dec)->thread_count = 1;
      (*dec)->err_recognition |= AV_EF_CRCCHECK | AV_EF_BITSTREAM | AV_EF_BUFFER | AV_EF_EXPLODE;
    }
    if (ret >= 0) ret = avcodec_open2(*dec, codec, nullptr);
    H3_CHECK(ret >= 0, "{}: cannot open the {} decoder ({})", path_, codec->name, av_error_text(ret));
    return idx;
  }

  void note_damage(const std::string& what) {
    H3_CHECK(!image_, "{}: the picture is damaged ({}); give a complete PNG, JPEG or WebP file", path_, what);
    if (damage_.size() < 8 && std::find(damage_.begin(), damage_.end(), what) == damage_.end()) damage_.push_back(what);
  }

  std::string path_;
  AVFormatContext* fc_ = nullptr;
  AVCodecContext *vdec_ = nullptr, *adec_ = nullptr;
  int vidx_ = -1, aidx_ = -1;
  bool image_ = false;
  std::vector<std::string> damage_;
};

// Frame holding to a constant rate: `emit(frame)` is called once per output frame with the source frame shown
// at that time (see media_read.h). Source timestamps are taken relative to the first decoded frame.
class FrameHolder {
 public:
  FrameHolder(int fps, int64_t max_out, AVStream* st, std::function<void(const AVFrame*)> emit)
      : fps_(fps), max_out_(max_out), st_(st), emit_(std::move(emit)) {}

  // Returns false once max_out frames were emitted.
  bool push(const AVFrame* f) {
    ++source_frames_;
    const double t = time_of(f);
    if (!cur_) {
      t0_ = t;
      cur_.reset(av_frame_clone(f));
      cur_t_ = 0;
      return !full();
    }
    const double rel = std::max(t - t0_, cur_t_);  // out-of-order stamps never go back in time
    H3_CHECK(rel <= kMaxMediaSeconds, "a frame is stamped {:.0f} s after the first; at most {:.0f} s are read", rel,
             kMaxMediaSeconds);
    emit_until(rel);
    last_delta_ = rel - cur_t_;
    cur_.reset(av_frame_clone(f));
    cur_t_ = rel;
    return !full();
  }
  void finish() {
    if (!cur_ || full()) return;
    const AVRational r = st_->avg_frame_rate;
    double dur = r.num > 0 && r.den > 0 ? av_q2d(av_inv_q(r)) : last_delta_ > 0 ? last_delta_ : 1.0 / fps_;
    emit_until(std::min(cur_t_ + dur, kMaxMediaSeconds));
    if (emitted_ == 0) {  // a picture shorter than one output frame still gives one frame
      emit_(cur_.get());
      ++emitted_;
    }
  }
  int64_t emitted() const { return emitted_; }
  int64_t source_frames() const { return source_frames_; }
  bool full() const { return max_out_ > 0 && emitted_ >= max_out_; }

 private:
  double time_of(const AVFrame* f) {
    const int64_t ts = f->best_effort_timestamp != AV_NOPTS_VALUE ? f->best_effort_timestamp : f->pts;
    if (ts == AV_NOPTS_VALUE) {
      const AVRational r = st_->avg_frame_rate;
      const double step = r.num > 0 && r.den > 0 ? av_q2d(av_inv_q(r)) : 1.0 / fps_;
      return static_cast<double>(source_frames_ - 1) * step;
    }
    return static_cast<double>(ts) * av_q2d(st_->time_base);
  }
  // Emits the current frame for every output time k / fps < end (1e-9 s of slack against rounding).
  void emit_until(double end) {
    while (!full() && static_cast<double>(emitted_) / fps_ < end - 1e-9) {
      emit_(cur_.get());
      ++emitted_;
    }
  }

  int fps_;
  int64_t max_out_;
  AVStream* st_;
  std::function<void(const AVFrame*)> emit_;
  FramePtr cur_;
  double t0_ = 0, cur_t_ = 0, last_delta_ = 0;
  int64_t emitted_ = 0, source_frames_ = 0;
};

// Audio to planar f32 stereo at a fixed rate; mono is duplicated, more channels are mixed down by swr.
class AudioCollector {
 public:
  // `keep` false: samples are only counted (a scan), never stored.
  AudioCollector(std::string path, int rate, int64_t max_samples, bool keep = true)
      : path_(std::move(path)), rate_(rate), max_(max_samples), keep_(keep) {}
  ~AudioCollector() {
    swr_free(&swr_);
    av_channel_layout_uninit(&out_layout_);
  }
  AudioCollector(const AudioCollector&) = delete;
  AudioCollector& operator=(const AudioCollector&) = delete;

  bool push(const AVFrame* f) {
    if (!swr_) init(f);
    convert(f->extended_data, f->nb_samples);
    return !full();
  }
  void finish() {
    if (swr_ && !full()) convert(nullptr, 0);
    if (max_ > 0) {
      for (auto& c : ch_)
        if (static_cast<int64_t>(c.size()) > max_) c.resize(static_cast<size_t>(max_));
      counted_ = std::min(counted_, max_);
    }
  }
  int64_t samples() const { return keep_ ? static_cast<int64_t>(ch_[0].size()) : counted_; }
  bool full() const { return max_ > 0 && samples() >= max_; }
  Tensor tensor() const {
    const int64_t n = samples();
    Tensor t(DType::f32, {2, n});
    float* p = t.data<float>();
    for (int c = 0; c < 2; ++c) std::copy(ch_[c].begin(), ch_[c].end(), p + c * n);
    return t;
  }

 private:
  void init(const AVFrame* f) {
    in_channels_ = f->ch_layout.nb_channels;
    H3_CHECK(in_channels_ >= 1, "{}: the audio stream has no channels", path_);
    av_channel_layout_default(&out_layout_, in_channels_ == 1 ? 1 : 2);
    // Twice at most: libswresample builds the down-mix itself for the layouts it knows; for one it does not (a
    // WAV of 9 or 25..64 channels in no named layout), the second try gives it a matrix.
    int ret = -1;
    for (const bool own_matrix : {false, true}) {
      swr_free(&swr_);
      AVChannelLayout in_layout{};
      av_channel_layout_copy(&in_layout, &f->ch_layout);
      ret = swr_alloc_set_opts2(&swr_, &out_layout_, AV_SAMPLE_FMT_FLTP, rate_, &in_layout,
                                static_cast<AVSampleFormat>(f->format), f->sample_rate, 0, nullptr);
      av_channel_layout_uninit(&in_layout);
      if (ret >= 0 && swr_ && own_matrix) ret = swr_set_matrix(swr_, downmix_matrix().data(), in_channels_);
      if (ret >= 0 && swr_ && (ret = swr_init(swr_)) >= 0) break;
      if (in_channels_ <= 2) break;  // mono and stereo need no matrix: the failure is elsewhere
    }
    H3_CHECK(ret >= 0 && swr_, "{}: libswresample cannot convert {} Hz {}-channel {} audio to {} Hz", path_,
             f->sample_rate, in_channels_, av_get_sample_fmt_name(static_cast<AVSampleFormat>(f->format)), rate_);
  }
  // Input channels in no layout libswresample knows, to stereo: the even-numbered channels averaged to the left,
  // the odd-numbered ones to the right (row-major [2][in_channels_], as swr_set_matrix reads it).
  std::vector<double> downmix_matrix() const {
    const int left = (in_channels_ + 1) / 2, right = in_channels_ / 2;
    std::vector<double> m(static_cast<size_t>(2 * in_channels_), 0.0);
    for (int i = 0; i < in_channels_; ++i)
      m[static_cast<size_t>((i % 2) * in_channels_ + i)] = i % 2 == 0 ? 1.0 / left : 1.0 / right;
    return m;
  }
  void convert(uint8_t** in, int n_in) {
    const int cap = swr_get_out_samples(swr_, n_in) + 16;
    if (cap <= 0) return;
    std::vector<float> a(static_cast<size_t>(cap)), b(static_cast<size_t>(cap));
    uint8_t* out[2] = {reinterpret_cast<uint8_t*>(a.data()), reinterpret_cast<uint8_t*>(b.data())};
    const int got = swr_convert(swr_, out, cap, const_cast<const uint8_t**>(in), n_in);
    H3_CHECK(got >= 0, "{}: resampling failed ({})", path_, av_error_text(got));
    if (!keep_) {
      counted_ += got;
      return;
    }
    const bool mono = out_layout_.nb_channels == 1;
    ch_[0].insert(ch_[0].end(), a.begin(), a.begin() + got);
    ch_[1].insert(ch_[1].end(), (mono ? a : b).begin(), (mono ? a : b).begin() + got);
  }

  std::string path_;
  int rate_;
  int64_t max_;
  bool keep_ = true;
  int64_t counted_ = 0;
  SwrContext* swr_ = nullptr;
  AVChannelLayout out_layout_{};
  int in_channels_ = 0;
  std::vector<float> ch_[2];
};

// One picture -> [3, H, W] f32 written at `dst` (plane stride H * W per channel, frame stride given).
class PictureScaler {
 public:
  PictureScaler(std::string path, int64_t width, int64_t height, FitMode fit)
      : path_(std::move(path)), W_(width), H_(height), fit_(fit) {}
  ~PictureScaler() { sws_freeContext(sws_); }
  PictureScaler(const PictureScaler&) = delete;
  PictureScaler& operator=(const PictureScaler&) = delete;

  // Writes channel c at dst + c * channel_stride, row-major H x W.
  void scale(const AVFrame* f, float* dst, int64_t channel_stride) {
    const int64_t w = f->width, h = f->height;
    int64_t sw = W_, sh = H_;
    if (fit_ == FitMode::cover) {
      const double s =
          std::max(static_cast<double>(W_) / static_cast<double>(w), static_cast<double>(H_) / static_cast<double>(h));
      sw = std::max<int64_t>(W_, std::llround(static_cast<double>(w) * s));
      sh = std::max<int64_t>(H_, std::llround(static_cast<double>(h) * s));
    }
    sws_ = sws_getCachedContext(sws_, static_cast<int>(w), static_cast<int>(h), static_cast<AVPixelFormat>(f->format),
                                static_cast<int>(sw), static_cast<int>(sh), AV_PIX_FMT_RGB24,
                                SWS_LANCZOS | SWS_ACCURATE_RND | SWS_FULL_CHR_H_INT, nullptr, nullptr, nullptr);
    H3_CHECK(sws_, "{}: libswscale cannot convert {}x{} {} pictures to {}x{} RGB", path_, w, h,
             av_get_pix_fmt_name(static_cast<AVPixelFormat>(f->format)), sw, sh);
    buf_.resize(static_cast<size_t>(sw * sh * 3));
    uint8_t* out[4] = {buf_.data(), nullptr, nullptr, nullptr};
    int out_stride[4] = {static_cast<int>(sw * 3), 0, 0, 0};
    const int rows = sws_scale(sws_, f->data, f->linesize, 0, static_cast<int>(h), out, out_stride);
    H3_CHECK(rows == sh, "{}: scaling gave {} rows, expected {}", path_, rows, sh);
    const int64_t x0 = (sw - W_) / 2, y0 = (sh - H_) / 2;
    for (int c = 0; c < 3; ++c)
      for (int64_t y = 0; y < H_; ++y) {
        const uint8_t* src = buf_.data() + ((y0 + y) * sw + x0) * 3 + c;
        float* d = dst + c * channel_stride + y * W_;
        for (int64_t x = 0; x < W_; ++x) d[x] = static_cast<float>(src[3 * x]) / 255.0f;
      }
  }

 private:
  std::string path_;
  int64_t W_, H_;
  FitMode fit_;
  SwsContext* sws_ = nullptr;
  std::vector<uint8_t> buf_;
};

void check_canvas_args(const std::string& path, int64_t width, int64_t height) {
  H3_CHECK(width > 0 && height > 0 && width <= 16384 && height <= 16384,
           "{}: cannot fit pictures to {}x{} (1..16384 pixels per side)", path, width, height);
}

}  // namespace

MediaInfo scan_media(const std::string& path, int fps, int sample_rate, int64_t max_frames, int64_t max_samples) {
  Demuxer d(path, true, true);
  H3_CHECK(d.has_video() || d.has_audio(), "{} holds neither pictures nor sound that this FFmpeg can decode", path);
  MediaInfo info;
  info.path = path;
  info.format = d.format();
  info.has_video = d.has_video();
  info.has_audio = d.has_audio();
  std::unique_ptr<FrameHolder> holder;
  if (d.has_video()) {
    info.width = d.vdec()->width;
    info.height = d.vdec()->height;
    info.video_codec = d.vdec()->codec->name;
    holder =
        std::make_unique<FrameHolder>(fps, std::max<int64_t>(max_frames, 0), d.video_stream(), [](const AVFrame*) {});
  }
  std::unique_ptr<AudioCollector> audio;
  if (d.has_audio()) {
    info.audio_codec = d.adec()->codec->name;
    audio = std::make_unique<AudioCollector>(path, sample_rate, std::max<int64_t>(max_samples, 0), false);
  }
  d.run(
      [&](AVFrame* f) {
        info.width = f->width;
        info.height = f->height;
        return holder->push(f);
      },
      [&](AVFrame* f) { return audio->push(f); });
  info.truncated = (holder && holder->full()) || (audio && audio->full());
  info.warnings = d.damage();
  if (holder) {
    // A still needs a second frame decoded to be told from a video; a truncated scan of a video has one.
    if (max_frames > 0 && holder->full() && holder->source_frames() == 1) info.truncated = false;
    holder->finish();
    info.frames = holder->emitted();
    info.still = holder->source_frames() == 1;
    if (holder->source_frames() == 0) info.has_video = false;
  }
  if (audio) {
    audio->finish();
    info.audio_samples = audio->samples();
    if (info.audio_samples == 0) info.has_audio = false;
  }
  H3_CHECK(info.has_video || info.has_audio, "{}: no picture or sound could be decoded (empty streams)", path);
  return info;
}

Tensor read_picture(const std::string& path, int64_t width, int64_t height, FitMode fit) {
  check_canvas_args(path, width, height);
  Demuxer d(path, true, false);
  H3_CHECK(d.has_video(), "{} holds no picture (an image such as PNG, JPEG or WebP is needed)", path);
  Tensor out(DType::f32, {3, height, width});
  PictureScaler scaler(path, width, height, fit);
  bool got = false;
  d.run(
      [&](AVFrame* f) {
        scaler.scale(f, out.data<float>(), height * width);
        got = true;
        return false;
      },
      {});
  H3_CHECK(got, "{}: no picture could be decoded", path);
  return out;
}

Tensor read_video_frames(const std::string& path, int fps, int64_t max_frames, int64_t width, int64_t height) {
  check_canvas_args(path, width, height);
  H3_CHECK(max_frames > 0 && max_frames <= 100000, "{}: cannot read {} frames", path, max_frames);
  Demuxer d(path, true, false);
  H3_CHECK(d.has_video(), "{} holds no pictures (a video file is needed)", path);
  const int64_t plane = height * width;
  std::vector<float> frames;  // [F][3][H][W] while reading, transposed to [3][F][H][W] at the end
  PictureScaler scaler(path, width, height, FitMode::stretch);
  FrameHolder holder(fps, max_frames, d.video_stream(), [&](const AVFrame* f) {
    const size_t at = frames.size();
    frames.resize(at + static_cast<size_t>(3 * plane));
    scaler.scale(f, frames.data() + at, plane);
  });
  d.run([&](AVFrame* f) { return holder.push(f); }, {});
  holder.finish();
  const int64_t F = holder.emitted();
  H3_CHECK(F > 0, "{}: no picture could be decoded", path);
  Tensor out(DType::f32, {3, F, height, width});
  float* o = out.data<float>();
  for (int64_t f = 0; f < F; ++f)
    for (int64_t c = 0; c < 3; ++c) std::copy_n(frames.data() + (f * 3 + c) * plane, plane, o + (c * F + f) * plane);
  return out;
}

Tensor read_audio(const std::string& path, int sample_rate, int64_t max_samples) {
  H3_CHECK(sample_rate > 0, "{}: bad sample rate {}", path, sample_rate);
  Demuxer d(path, false, true);
  H3_CHECK(d.has_audio(), "{} holds no sound (an audio file, or a video with a soundtrack, is needed)", path);
  AudioCollector audio(path, sample_rate, max_samples);
  d.run({}, [&](AVFrame* f) { return audio.push(f); });
  audio.finish();
  H3_CHECK(audio.samples() > 0, "{}: the audio stream decodes to no samples", path);
  return audio.tensor();
}

}  // namespace h3

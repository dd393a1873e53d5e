// WAV (16-bit PCM, written by hand: a RIFF header and interleaved little-endian samples) and PNG frames
// (libavcodec's png encoder on 8-bit RGB), both written through media::PartialFile.
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavutil/frame.h>
}

#include "media/media_util.h"
#include "media/mp4_writer.h"

namespace h3 {

namespace {

void put_u32(std::string& s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}
void put_u16(std::string& s, uint16_t v) {
  s.push_back(static_cast<char>(v & 0xff));
  s.push_back(static_cast<char>(v >> 8));
}

void write_bytes(const media::PartialFile& f, const char* what, const std::function<void(std::ofstream&)>& body) {
  std::ofstream out(f.partial(), std::ios::binary | std::ios::trunc);
  if (!out)
    fail("{} {}: cannot create {}: {}; check that the folder exists and is writable", what, f.final_path(), f.partial(),
         std::strerror(errno));
  body(out);
  out.close();
  if (!out) fail("{} {}: writing {} failed; is the disk full?", what, f.final_path(), f.partial());
}

// A printf pattern with exactly one integer conversion (%d, %i, %u or %0Nd) and no other '%' except "%%".
bool valid_frame_pattern(const std::string& p) {
  int conversions = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] != '%') continue;
    if (i + 1 < p.size() && p[i + 1] == '%') {
      ++i;
      continue;
    }
    size_t j = i + 1;
    while (j < p.size() && std::isdigit(static_cast<unsigned char>(p[j]))) ++j;
    if (j >= p.size() || (p[j] != 'd' && p[j] != 'i' && p[j] != 'u') || j - i > 4) return false;
    ++conversions;
    i = j;
  }
  return conversions == 1;
}

struct CodecCtxDeleter {
  void operator()(AVCodecContext* c) const { avcodec_free_context(&c); }
};
struct FrameDeleter {
  void operator()(AVFrame* f) const { av_frame_free(&f); }
};
struct PacketDeleter {
  void operator()(AVPacket* p) const { av_packet_free(&p); }
};

}  // namespace

void write_wav(const std::string& path, const Tensor& wave, int sample_rate) {
  media::check_output_path(path, "wav");
  H3_CHECK(sample_rate > 0, "wav {}: sample rate {} must be positive", path, sample_rate);
  const media::WaveView v = media::wave_view(wave, "wav " + path);
  H3_CHECK(v.channels <= 65535, "wav {}: {} channels", path, v.channels);
  const uint64_t data_bytes = static_cast<uint64_t>(v.channels) * static_cast<uint64_t>(v.samples) * 2;
  H3_CHECK(data_bytes + 36 <= 0xffffffffull, "wav {}: {} bytes of samples exceed the 4 GiB RIFF limit", path,
           data_bytes);
  std::string head;
  head += "RIFF";
  put_u32(head, static_cast<uint32_t>(36 + data_bytes));
  head += "WAVEfmt ";
  put_u32(head, 16);
  put_u16(head, 1);  // PCM
  put_u16(head, static_cast<uint16_t>(v.channels));
  put_u32(head, static_cast<uint32_t>(sample_rate));
  put_u32(head, static_cast<uint32_t>(sample_rate * v.channels * 2));  // byte rate
  put_u16(head, static_cast<uint16_t>(v.channels * 2));                // block align
  put_u16(head, 16);
  head += "data";
  put_u32(head, static_cast<uint32_t>(data_bytes));

  media::PartialFile file(path);
  write_bytes(file, "wav", [&](std::ofstream& out) {
    out.write(head.data(), static_cast<std::streamsize>(head.size()));
    std::string buf;
    buf.reserve(65536);
    for (int64_t i = 0; i < v.samples; ++i) {
      for (int64_t c = 0; c < v.channels; ++c) {
        // x in [-1, 1] -> round(x * 32767): symmetric, 0 stays 0, full scale never wraps.
        const auto s = static_cast<int16_t>(std::lround(v.at(c, i) * 32767.0f));
        put_u16(buf, static_cast<uint16_t>(s));
      }
      if (buf.size() >= 65000) {
        out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
        buf.clear();
      }
    }
    out.write(buf.data(), static_cast<std::streamsize>(buf.size()));
  });
  file.commit();
}

namespace {

// Frame t of `v` as one PNG file at `out_path` (atomically), through libavcodec's png encoder; `frame` is an
// RGB24 frame of v's size.
void encode_png_file(const AVCodec* codec, AVFrame* frame, AVPacket* pkt, const media::PixelView& v, int64_t t,
                     const std::string& out_path) {
  media::check_output_path(out_path, "png");
  // One encoder per image: png is intra-only, and a fresh context keeps every file independent.
  std::unique_ptr<AVCodecContext, CodecCtxDeleter> ctx(avcodec_alloc_context3(codec));
  H3_CHECK(ctx, "png {}: out of memory", out_path);
  ctx->width = frame->width;
  ctx->height = frame->height;
  ctx->pix_fmt = AV_PIX_FMT_RGB24;
  ctx->time_base = AVRational{1, 24};
  int ret = avcodec_open2(ctx.get(), codec, nullptr);
  H3_CHECK(ret >= 0, "png {}: opening the png encoder: {}", out_path, media::av_error_text(ret));
  ret = av_frame_make_writable(frame);
  H3_CHECK(ret >= 0, "png {}: frame buffer: {}", out_path, media::av_error_text(ret));
  v.rgb24(t, frame->data[0], frame->linesize[0]);
  frame->pts = t;
  ret = avcodec_send_frame(ctx.get(), frame);
  if (ret >= 0) ret = avcodec_send_frame(ctx.get(), nullptr);
  H3_CHECK(ret >= 0, "png {}: encoding: {}", out_path, media::av_error_text(ret));
  ret = avcodec_receive_packet(ctx.get(), pkt);
  H3_CHECK(ret >= 0, "png {}: encoding: {}", out_path, media::av_error_text(ret));
  media::PartialFile file(out_path);
  write_bytes(file, "png", [&](std::ofstream& out) { out.write(reinterpret_cast<const char*>(pkt->data), pkt->size); });
  av_packet_unref(pkt);
  file.commit();
}

// An RGB24 frame of v's size and the packet the encoder fills.
struct PngBuffers {
  std::unique_ptr<AVFrame, FrameDeleter> frame;
  std::unique_ptr<AVPacket, PacketDeleter> pkt;
  const AVCodec* codec = nullptr;
};
PngBuffers png_buffers(const media::PixelView& v, const std::string& where) {
  H3_CHECK(v.width > 0 && v.height > 0 && v.width <= 65535 && v.height <= 65535,
           "png {}: frame size {} x {} out of range", where, v.width, v.height);
  PngBuffers b;
  b.codec = avcodec_find_encoder(AV_CODEC_ID_PNG);
  H3_CHECK(b.codec, "png {}: this libavcodec ({}) has no png encoder; install a full libavcodec", where,
           av_version_info());
  b.frame.reset(av_frame_alloc());
  b.pkt.reset(av_packet_alloc());
  H3_CHECK(b.frame && b.pkt, "png {}: out of memory", where);
  b.frame->format = AV_PIX_FMT_RGB24;
  b.frame->width = static_cast<int>(v.width);
  b.frame->height = static_cast<int>(v.height);
  const int ret = av_frame_get_buffer(b.frame.get(), 0);
  H3_CHECK(ret >= 0, "png {}: frame buffer: {}", where, media::av_error_text(ret));
  return b;
}

}  // namespace

void write_png(const std::string& path, const Tensor& picture) {
  H3_CHECK(picture.ndim() == 3 || (picture.ndim() == 4 && picture.dim(1) == 1),
           "png {}: a picture is [3, H, W] (or [3, 1, H, W]), got {}", path, picture.describe());
  const Tensor p4 =
      picture.ndim() == 3 ? picture.reshape({picture.dim(0), 1, picture.dim(1), picture.dim(2)}) : picture;
  const media::PixelView v = media::pixel_view(p4, "png " + path);
  PngBuffers b = png_buffers(v, path);
  encode_png_file(b.codec, b.frame.get(), b.pkt.get(), v, 0, path);
}

std::vector<std::string> write_png_frames(const std::string& dir_or_pattern, const Tensor& pixels) {
  namespace fs = std::filesystem;
  H3_CHECK(!dir_or_pattern.empty(), "png frames: empty output; give a folder or a pattern like out/frame_%05d.png");
  const media::PixelView v = media::pixel_view(pixels, "png frames " + dir_or_pattern);
  std::string pattern = dir_or_pattern;
  if (dir_or_pattern.find('%') == std::string::npos) {
    std::error_code ec;
    fs::create_directories(dir_or_pattern, ec);
    H3_CHECK(fs::is_directory(dir_or_pattern),
             "png frames: cannot create the folder {}{}; check the path and its permissions", dir_or_pattern,
             ec ? ": " + ec.message() : "");
    pattern = (fs::path(dir_or_pattern) / "frame_%05d.png").string();
  } else {
    H3_CHECK(valid_frame_pattern(dir_or_pattern),
             "png frames: pattern {} must hold exactly one integer conversion such as %05d (and '%%' for a "
             "literal '%')",
             dir_or_pattern);
  }
  PngBuffers b = png_buffers(v, "frames " + pattern);

  std::vector<std::string> paths;
  // A failure part-way removes the frames this call already wrote: all frames or none.
  struct Cleanup {
    std::vector<std::string>& paths;
    bool done = false;
    ~Cleanup() {
      std::error_code ec;
      if (!done)
        for (const auto& p : paths) fs::remove(p, ec);
    }
  } cleanup{paths};
  for (int64_t t = 0; t < v.frames; ++t) {
    std::vector<char> name(pattern.size() + 32);
    std::snprintf(name.data(), name.size(), pattern.c_str(), static_cast<int>(t));
    const std::string out_path(name.data());
    encode_png_file(b.codec, b.frame.get(), b.pkt.get(), v, t, out_path);
    paths.push_back(out_path);
  }
  cleanup.done = true;
  return paths;
}

}  // namespace h3

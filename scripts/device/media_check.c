// A quick check of the carried FFmpeg libraries on the GPU machine before a full build (scripts/device/
// unpack_debs.sh, then: cc media_check.c $(pkg-config --cflags --libs libavformat libavcodec libavutil libswscale
// libswresample) -o media_check && ./media_check OUT.mp4): opens the encoders h3's MP4 writer uses (libx264, the
// native aac), a scaler and a resampler, and writes a 12-frame 64x64 H.264 MP4. Exit 0 when all of that works.
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/opt.h>
#include <libswresample/swresample.h>
#include <libswscale/swscale.h>
#include <stdio.h>

static int check(int ret, const char* what) {
  if (ret < 0) {
    char buf[256];
    av_strerror(ret, buf, sizeof buf);
    fprintf(stderr, "media_check: %s failed: %s\n", what, buf);
  }
  return ret;
}

int main(int argc, char** argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: media_check OUT.mp4\n");
    return 2;
  }
  printf("libavformat %u, libavcodec %u, libavutil %u, libswscale %u, libswresample %u\n", avformat_version(),
         avcodec_version(), avutil_version(), swscale_version(), swresample_version());
  const AVCodec* aac = avcodec_find_encoder_by_name("aac");
  const AVCodec* x264 = avcodec_find_encoder_by_name("libx264");
  if (!aac || !x264) {
    fprintf(stderr, "media_check: encoder missing: aac %s, libx264 %s\n", aac ? "ok" : "MISSING",
            x264 ? "ok" : "MISSING");
    return 1;
  }
  struct SwsContext* sws = sws_getContext(64, 64, AV_PIX_FMT_RGB24, 64, 64, AV_PIX_FMT_YUV420P, SWS_BICUBIC, NULL,
                                          NULL, NULL);
  SwrContext* swr = swr_alloc();
  if (!sws || !swr) {
    fprintf(stderr, "media_check: swscale/swresample contexts could not be made\n");
    return 1;
  }
  AVFormatContext* fmt = NULL;
  if (check(avformat_alloc_output_context2(&fmt, NULL, "mp4", argv[1]), "mp4 muxer") < 0) return 1;
  AVStream* st = avformat_new_stream(fmt, NULL);
  AVCodecContext* c = avcodec_alloc_context3(x264);
  c->width = 64, c->height = 64, c->pix_fmt = AV_PIX_FMT_YUV420P;
  c->time_base = (AVRational){1, 24};
  c->framerate = (AVRational){24, 1};
  if (fmt->oformat->flags & AVFMT_GLOBALHEADER) c->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  av_opt_set(c->priv_data, "preset", "ultrafast", 0);
  if (check(avcodec_open2(c, x264, NULL), "opening libx264") < 0) return 1;
  avcodec_parameters_from_context(st->codecpar, c);
  st->time_base = c->time_base;
  if (check(avio_open(&fmt->pb, argv[1], AVIO_FLAG_WRITE), "opening the output") < 0) return 1;
  if (check(avformat_write_header(fmt, NULL), "writing the header") < 0) return 1;
  AVFrame* f = av_frame_alloc();
  f->format = c->pix_fmt, f->width = 64, f->height = 64;
  av_frame_get_buffer(f, 0);
  AVPacket* pkt = av_packet_alloc();
  for (int i = 0; i <= 12; ++i) {
    if (i < 12) {
      av_frame_make_writable(f);
      for (int y = 0; y < 64; ++y)
        for (int x = 0; x < 64; ++x) f->data[0][y * f->linesize[0] + x] = (uint8_t)(x + y + 8 * i);
      for (int y = 0; y < 32; ++y)
        for (int x = 0; x < 32; ++x) f->data[1][y * f->linesize[1] + x] = f->data[2][y * f->linesize[2] + x] = 128;
      f->pts = i;
    }
    if (check(avcodec_send_frame(c, i < 12 ? f : NULL), "encoding") < 0) return 1;
    while (avcodec_receive_packet(c, pkt) == 0) {
      av_packet_rescale_ts(pkt, c->time_base, st->time_base);
      pkt->stream_index = st->index;
      if (check(av_interleaved_write_frame(fmt, pkt), "writing a packet") < 0) return 1;
    }
  }
  av_write_trailer(fmt);
  avio_closep(&fmt->pb);
  printf("media_check: wrote %s (H.264 via libx264; aac, swscale, swresample present)\n", argv[1]);
  return 0;
}

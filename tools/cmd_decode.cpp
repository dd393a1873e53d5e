// h3 decode LATENTS -o OUT.mp4: final latents (a safetensors file) -> video VAE + audio VAE decode (sharded
// over --ranks N) -> MP4 on rank 0, optionally a WAV and PNG frames too.
//
// Keys read from LATENTS (the first present of each list):
//   video: video_latents | output.video_latents  ->  [C, T, h, w] or [1, C, T, h, w], in the DiT's
//          (normalised) latent space, as `h3 generate --latents` and pipeline-t2va-mini store them;
//   audio: audio_latents | output.audio_latents  ->  [2, C_a, A] (stereo latents), or
//          audio_latent_rows | output.audio_latent_rows | audio_rows | output.audio_rows | the last
//          stepN.audio_rows  ->  [2A, C_a] (the DiT's rows, row = ch * A + a).
// Both are de-normalised with the VAE's latents_mean/std before decoding. Without audio latents (or with
// --no-audio) the MP4 has no audio track.
//
// Every output is atomic (media/mp4_writer.h), and the outputs of one run go together: when any of them
// fails, the ones already written by this run are removed, so the command leaves either all requested files
// or none.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "distributed/comm.h"
#include "io/procedural.h"
#include "io/safetensors.h"
#include "media/mp4_writer.h"
#include "model/dit/layout.h"
#include "model/qwen3vl/procedural.h"
#include "model/vae/audio_vae.h"
#include "model/vae/open.h"
#include "model/vae/procedural.h"
#include "model/vae/shard.h"
#include "model/vae/video_vae.h"

namespace h3::cli {

namespace {

namespace fs = std::filesystem;
using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

const char* const kVideoKeys[] = {"video_latents", "output.video_latents"};
const char* const kAudioLatentKeys[] = {"audio_latents", "output.audio_latents"};
const char* const kAudioRowKeys[] = {"audio_latent_rows", "output.audio_latent_rows", "audio_rows",
                                     "output.audio_rows"};

std::string key_list(const SafeTensors& f) {
  std::string s;
  int n = 0;
  for (const auto& k : f.keys()) {
    if (k.starts_with("weight.")) continue;
    if (n++ == 12) return s + ", ...";
    s += (s.empty() ? "" : ", ") + k;
  }
  return s.empty() ? "(none)" : s;
}

// The golden pipeline file keeps its final audio rows as the last step's output "stepN.audio_rows".
std::string last_step_audio_rows(const SafeTensors& f) {
  std::string best;
  int64_t best_n = -1;
  for (const auto& k : f.keys()) {
    if (!k.starts_with("step") || !k.ends_with(".audio_rows")) continue;
    const std::string num = k.substr(4, k.size() - 4 - std::string(".audio_rows").size());
    if (num.empty() || num.find_first_not_of("0123456789") != std::string::npos) continue;
    const int64_t n = std::stoll(num);
    if (n > best_n) best_n = n, best = k;
  }
  return best;
}

struct Outputs {
  std::vector<std::string> written;
  bool keep = false;
  ~Outputs() {
    std::error_code ec;
    if (!keep)
      for (const auto& p : written) fs::remove(p, ec);
  }
};

struct DecodeOpts {
  std::string latents, out, video_vae = "procedural:mini", audio_vae = "procedural:mini", precision = "f32";
  std::string wav, png_dir;
  bool no_audio = false;
  int crf = 18;
};

// The latents of the file: which tensors, shaped like latents and in f32.
struct Latents {
  std::string vkey, akey;
  Tensor z;  // video [C, T, h, w]
  Tensor a;  // audio [2, C_a, A], or undefined
};

Latents read_latents(const SafeTensors& f, const DecodeOpts& o) {
  Latents l;
  for (const char* k : kVideoKeys)
    if (l.vkey.empty() && f.has(k)) l.vkey = k;
  H3_CHECK(!l.vkey.empty(),
           "{}: no video latents; expected a tensor named video_latents (or output.video_latents) "
           "[C, T, h, w]; the file holds: {}",
           o.latents, key_list(f));
  Tensor z = f.get(l.vkey);
  if (z.ndim() == 5 && z.dim(0) == 1) z = z.reshape({z.dim(1), z.dim(2), z.dim(3), z.dim(4)});
  H3_CHECK(z.ndim() == 4 && z.numel() > 0 && dtype_is_float(z.dtype()),
           "{}: {} is {}; video latents must be float [C, T, h, w] (or [1, C, T, h, w]) with every size >= 1",
           o.latents, l.vkey, z.describe());
  l.z = z.to(DType::f32);

  bool rows = false;
  if (!o.no_audio) {
    for (const char* k : kAudioLatentKeys)
      if (l.akey.empty() && f.has(k)) l.akey = k;
    for (const char* k : kAudioRowKeys)
      if (l.akey.empty() && f.has(k)) l.akey = k, rows = true;
    if (l.akey.empty() && !(l.akey = last_step_audio_rows(f)).empty()) rows = true;
  }
  if (l.akey.empty()) return l;
  Tensor a = f.get(l.akey);
  H3_CHECK(dtype_is_float(a.dtype()), "{}: {} is {}; audio latents must be float", o.latents, l.akey, a.describe());
  if (rows) {
    H3_CHECK(a.ndim() == 2 && a.dim(0) >= 2 && a.dim(0) % 2 == 0 && a.dim(1) >= 1,
             "{}: {} is {}; audio rows must be [2A, C] (two stereo channels of A latents, row = ch * A + a)", o.latents,
             l.akey, a.describe());
    l.a = unpack_audio(a.to(DType::f32), a.dim(0) / 2);
  } else {
    if (a.ndim() == 4 && a.dim(0) == 1) a = a.reshape({a.dim(1), a.dim(2), a.dim(3)});
    H3_CHECK(a.ndim() == 3 && a.dim(0) == 2 && a.dim(1) >= 1 && a.dim(2) >= 1,
             "{}: {} is {}; audio latents must be stereo [2, C, A]", o.latents, l.akey, a.describe());
    l.a = a.to(DType::f32);
  }
  return l;
}

// The MP4's geometry and metadata: the request that produced the latents (h3 generate writes "request"; golden
// files "info") travels along.
MediaSpec media_spec(const DecodeOpts& o, const SafeTensors& f, const Latents& l, const VideoVae& vvae,
                     const AudioVae* avae, int ranks) {
  const int64_t r = vvae.config().spatial_ratio();
  MediaSpec ms;
  ms.width = l.z.dim(3) * r;
  ms.height = l.z.dim(2) * r;
  ms.fps = 24;
  ms.channels = avae ? 2 : 0;
  ms.sample_rate = avae ? static_cast<int>(avae->config().sampling_rate) : 32000;
  ms.crf = o.crf;
  nlohmann::json info = {{"command", "h3 decode"},        {"latents", fs::path(o.latents).filename().string()},
                         {"video_key", l.vkey},           {"audio_key", l.akey},
                         {"video_vae", o.video_vae},      {"audio_vae", avae ? o.audio_vae : ""},
                         {"precision", o.precision},      {"ranks", ranks},
                         {"latent_shape", l.z.shape()},   {"width", ms.width},
                         {"height", ms.height},           {"fps", ms.fps},
                         {"sample_rate", ms.sample_rate}, {"crf", ms.crf}};
  const std::string request = f.meta("request").empty() ? f.meta("info") : f.meta("request");
  ms.metadata["comment"] = request.empty() ? info.dump() : request;
  ms.metadata["h3_decode"] = info.dump();
  if (!request.empty()) ms.metadata["h3_request"] = request;
  return ms;
}

// What the decode made, and its times.
struct Decoded {
  Tensor pixels;  // the whole clip, unless it was streamed into the MP4
  int64_t frames = 0;
  Tensor wave;
  double video_s = 0, audio_s = 0, stream_encode_s = 0;
  ShardDecodeStats vst, ast;
};

// Every rank decodes (units sharded over the world, the whole result on every rank). With `mp4` (one rank writing
// only the MP4) frames go to the encoder as the decode finishes them (on a GPU they are stitched there and
// downloaded a chunk at a time), so the clip is never held; otherwise the whole clip.
Decoded decode_all(VideoVae& vvae, AudioVae* avae, const Latents& l, Comm& w, Mp4Writer* stream_to) {
  Decoded d;
  auto t0 = clock_type::now();
  if (stream_to) {
    vvae.decode_streaming(vvae.denormalize(l.z), [&](int64_t, const Tensor& part) {
      const auto te = clock_type::now();
      stream_to->add_frames(VideoVae::to_pixels01(part));
      d.stream_encode_s += seconds_since(te);
      d.frames += part.dim(1);
    });
    d.vst.units = static_cast<int64_t>(vvae.plan_decode(l.z.shape()).units.size());
  } else {
    d.pixels = VideoVae::to_pixels01(decode_video_sharded(vvae, vvae.denormalize(l.z), w, &d.vst));
    d.frames = d.pixels.dim(1);
  }
  d.video_s = seconds_since(t0) - d.stream_encode_s;
  if (avae) {
    t0 = clock_type::now();
    d.wave = decode_audio_sharded(*avae, avae->denormalize(l.a), w, &d.ast);
    d.wave = d.wave.reshape({d.wave.dim(0), d.wave.dim(-1)}).to(DType::f32);
    d.audio_s = seconds_since(t0);
  }
  return d;
}

int run_decode(const DecodeOpts& o, const GlobalContext& ctx) {
  Comm& w = world();
  const bool root = w.rank() == 0;
  const auto t_start = clock_type::now();
  SafeTensors f = SafeTensors::open(o.latents);
  const Latents l = read_latents(f, o);
  const Tensor& z = l.z;
  const Tensor& a = l.a;

  // The VAEs: a file, a folder (one file or an index and its shards) or procedural:mini|full (model/vae/open.h).
  const Precision prec = precision_from_name(o.precision);
  const Device dev = ctx.compute_device();
  std::unique_ptr<VideoVae> vvae = open_video_vae(o.video_vae, prec, dev);
  std::unique_ptr<AudioVae> avae;
  const VideoVaeConfig& vc = vvae->config();
  H3_CHECK(z.dim(0) == vc.latent_channels,
           "{}: {} has {} channels but the video VAE ({}) takes {}; the latents and the VAE do not belong "
           "together",
           o.latents, l.vkey, z.dim(0), o.video_vae, vc.latent_channels);
  if (a.defined() && a.numel() > 0) {
    avae = open_audio_vae(o.audio_vae, prec, dev);
    H3_CHECK(a.dim(1) == avae->config().latent_channels,
             "{}: {} has {} latent channels but the audio VAE ({}) takes {}; pass the matching --audio-vae", o.latents,
             l.akey, a.dim(1), o.audio_vae, avae->config().latent_channels);
  }

  // Open the outputs before the expensive decode, so that an unwritable path or a missing codec fails at once.
  const MediaSpec ms = media_spec(o, f, l, *vvae, avae.get(), w.size());
  std::unique_ptr<Mp4Writer> mp4;
  if (root) {
    if (!o.wav.empty())
      H3_CHECK(avae, "--wav {}: {} holds no audio latents (or --no-audio was given)", o.wav, o.latents);
    if (!o.png_dir.empty())
      H3_CHECK(!fs::exists(o.png_dir) || fs::is_directory(o.png_dir), "--png-dir {}: exists and is not a folder",
               o.png_dir);
    mp4 = std::make_unique<Mp4Writer>(o.out, ms);
  }
  spdlog::info("decode {}: video {} {} with {} ({}), audio {} with {}", o.latents, l.vkey, shape_str(z.shape()),
               o.video_vae, vc.summary(), l.akey.empty() ? "none" : l.akey + " " + shape_str(a.shape()),
               avae ? o.audio_vae : "-");

  const bool stream = w.size() == 1 && o.png_dir.empty();
  const Decoded d = decode_all(*vvae, avae.get(), l, w, stream ? mp4.get() : nullptr);
  if (!root) return 0;

  // Write (rank 0): all requested files or none.
  Outputs outs;
  const auto t0 = clock_type::now();
  if (!stream) mp4->add_frames(d.pixels);
  if (avae) mp4->add_audio(d.wave);
  mp4->finish();
  outs.written.push_back(o.out);
  const double mp4_s = seconds_since(t0) + d.stream_encode_s;
  if (!o.wav.empty()) {
    write_wav(o.wav, d.wave, ms.sample_rate);
    outs.written.push_back(o.wav);
  }
  if (!o.png_dir.empty()) {
    const auto pngs = write_png_frames(o.png_dir, d.pixels);
    outs.written.insert(outs.written.end(), pngs.begin(), pngs.end());
  }
  outs.keep = true;
  const int64_t frames = d.frames;
  std::printf("decode: video %s -> %lld frames %lld x %lld (%.3f s on %d rank(s), %lld units here)\n",
              shape_str(z.shape()).c_str(), static_cast<long long>(frames), static_cast<long long>(ms.width),
              static_cast<long long>(ms.height), d.video_s, w.size(), static_cast<long long>(d.vst.units));
  if (avae)
    std::printf("decode: audio %s -> %lld samples x %lld channels at %d Hz (%.3f s)\n", shape_str(a.shape()).c_str(),
                static_cast<long long>(d.wave.dim(1)), static_cast<long long>(d.wave.dim(0)), ms.sample_rate,
                d.audio_s);
  std::printf("wrote %s (H.264 crf %d%s, 24 fps, %.2f s): encode %.3f s, %.2f ms per frame; total %.3f s\n",
              o.out.c_str(), ms.crf, avae ? " + AAC" : ", no audio", static_cast<double>(frames) / ms.fps, mp4_s,
              1e3 * mp4_s / static_cast<double>(frames), seconds_since(t_start));
  if (!o.wav.empty()) std::printf("wrote %s\n", o.wav.c_str());
  if (!o.png_dir.empty())
    std::printf("wrote %lld PNG frames to %s\n", static_cast<long long>(frames), o.png_dir.c_str());
  return 0;
}

}  // namespace

Runner add_decode(CLI::App& app) {
  auto* cmd = app.add_subcommand("decode",
                                 "decode final latents (safetensors: video_latents [C,T,h,w] and "
                                 "audio_latent_rows [2A,C] or audio_latents "
                                 "[2,C,A]; also the golden output.video_latents / stepN.audio_rows) with the "
                                 "video and audio VAEs into an "
                                 "MP4 (H.264 + AAC, 24 fps, 32 kHz stereo), optionally a WAV and PNG frames");
  auto o = std::make_shared<DecodeOpts>();
  cmd->add_option("latents", o->latents, "safetensors file of final latents")->required();
  add(cmd, opt::output, o->out);
  add(cmd, opt::video_vae, o->video_vae);
  add(cmd, opt::audio_vae, o->audio_vae);
  add(cmd, opt::precision, o->precision);
  cmd->add_option("--wav", o->wav, "also write the soundtrack as 16-bit PCM WAV")->envname("H3_WAV");
  cmd->add_option("--png-dir", o->png_dir, "also write every frame as PNG (DIR/frame_00000.png, ...)")
      ->envname("H3_PNG_DIR");
  add(cmd, opt::no_audio, o->no_audio);
  cmd->add_option("--crf", o->crf, "H.264 constant rate factor (0 lossless .. 51; lower = better)")
      ->check(CLI::Range(0, 51))
      ->envname("H3_CRF")
      ->capture_default_str();
  return [o](const GlobalContext& ctx) { return run_decode(*o, ctx); };
}

}  // namespace h3::cli

// The write phase (phases.h), rank 0: the MP4 (its frames already streamed to the encoder, or all of them now) and
// the latents. The MP4 writer and write_safetensors are atomic; a failure removes what this request wrote.
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "core/log.h"
#include "io/safetensors.h"
#include "pipeline/geometry.h"
#include "pipeline/phases.h"

namespace h3 {

namespace fs = std::filesystem;

namespace {

// The request as the MP4 tells it: keyframes, references and LoRAs by file name only. The file travels (a server's
// output is downloaded by its client), and an absolute path told where the server keeps its uploads and models.
nlohmann::json comment_of(const ResolvedRequest& req) {
  nlohmann::json j = req.to_json();
  for (const char* list : {"media", "loras"})
    for (nlohmann::json& e : j[list])
      if (e.contains("path") && e["path"].is_string())
        e["path"] = fs::path(e["path"].get<std::string>()).filename().string();
  return j;
}

}  // namespace

MediaSpec media_spec(const ModelSources& src, const ResolvedRequest& req) {
  MediaSpec ms;
  ms.width = req.width;
  ms.height = req.height;
  ms.fps = static_cast<int>(kFps);
  ms.sample_rate = static_cast<int>(src.avae_config.sampling_rate);
  ms.channels = 2;
  ms.metadata["comment"] = comment_of(req).dump();
  ms.metadata["title"] = req.prompt.substr(0, 200);
  ms.metadata["h3_seed"] = std::to_string(req.seed);
  return ms;
}

namespace {

// The MP4 from the streamed writer, or every frame now. Rank 0 alone writes, so its own flag decides here: a cancel
// stops within one frame's encode, and the destroyed writer removes its partial file.
void write_mp4(RequestRun& run, const ModelResidency& models, const Decoded& media, const std::string& out_path) {
  if (media.mp4) {
    media.mp4->finish(media.wave);
    const StreamingMp4::Times& mt = media.mp4->times();
    spdlog::info(
        "mp4: the writer thread prepared the frames in {:.2f} s and encoded them in {:.2f} s, then libx264's {} "
        "delayed frames in {:.2f} s (from the end of the video decode); finish() encoded the audio in {:.2f} s, "
        "waited {:.2f} s for the video and wrote the trailer in {:.2f} s",
        mt.prepare, mt.encode, mt.writer.video_delayed, mt.writer.video_flush, mt.audio, mt.finish_wait,
        mt.finish_tail);
    return;
  }
  Mp4Writer w(out_path, media_spec(models.sources(), run.res.request));
  if (!w.add_frames(media.pixels, [&run] { return run.cancel && run.cancel->load(); }))
    throw Cancelled("request cancelled while writing the video");
  w.add_audio(media.wave);
  w.finish();
}

}  // namespace

void write_phase(RequestRun& run, const ModelResidency& models, const Decoded& media, const std::string& out_path) {
  GenerateResult& res = run.res;
  const ResolvedRequest& req = res.request;
  const auto t0 = phase_clock::now();
  run.report("write", 0, 1, 100 - RequestRun::w_write, RequestRun::w_write);
  if (run.root && !out_path.empty()) {
    const std::string latents_path = fs::path(out_path).replace_extension(".latents.safetensors").string();
    std::map<std::string, std::string> md = {{"request", req.to_json().dump()}, {"generator", "h3 generate"}};
    write_mp4(run, models, media, out_path);
    res.wrote_mp4 = true;
    res.out_path = out_path;
    if (models.options().write_latents) {
      try {
        write_safetensors(latents_path,
                          {{"video_latents", res.video_latents}, {"audio_latent_rows", res.audio_latent_rows}}, md);
      } catch (...) {
        std::error_code ec;
        fs::remove(out_path, ec);
        throw;
      }
    }
  }
  phase_done(run, models, "mux", t0, models.loads().size());
}

}  // namespace h3

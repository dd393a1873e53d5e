#include "pipeline/run_record.h"

#include <fmt/format.h>

#include <algorithm>

namespace h3 {

nlohmann::json timings_json(const GenerateResult& r) {
  nlohmann::json t = nlohmann::json::object();
  for (const auto& p : r.timings) t[p.phase] = t.value(p.phase, 0.0) + p.seconds;
  return t;
}

nlohmann::json loads_json(const GenerateResult& r) {
  nlohmann::json a = nlohmann::json::array();
  for (const auto& l : r.loads)
    a.push_back({{"model", l.model},
                 {"seconds", l.seconds},
                 {"file_bytes", l.file_bytes},
                 {"device_bytes", l.device_bytes},
                 {"gb_per_s", l.gb_per_s()}});
  return a;
}

nlohmann::json peaks_json(const GenerateResult& r) {
  nlohmann::json p = nlohmann::json::object();
  for (const auto& x : r.peaks) p[x.phase] = x.bytes;
  return p;
}

nlohmann::json windows_json(const GenerateResult& r) {
  nlohmann::json w = nlohmann::json::object();
  for (const auto& x : r.windows) w[x.phase] = {x.start_unix_s, x.end_unix_s};
  return w;
}

nlohmann::json host_peaks_json(const GenerateResult& r) {
  nlohmann::json p = nlohmann::json::object();
  for (const auto& x : r.windows) p[x.phase] = std::max(p.value(x.phase, int64_t{0}), x.host_rss_peak_bytes);
  return p;
}

nlohmann::json generate_record(const GenerateResult& r, const GenerateOptions& o, const RecordContext& ctx) {
  const ResolvedRequest& q = r.request;
  const bool gpu = o.device == Device::cuda;
  nlohmann::json j = {
      {"resolution", fmt::format("{}x{}", q.width, q.height)},
      {"width", q.width},
      {"height", q.height},
      {"frames", q.frames},
      {"seconds", q.seconds},
      {"steps", q.steps},
      {"model_calls", q.model_calls},
      {"mode", q.mode},
      {"seed", q.seed},
      {"precision", std::string(precision_name(r.precision))},
      {"vae_precision", std::string(precision_name(o.vae_precision))},
      {"text_precision", std::string(precision_name(o.text_precision))},
      {"text_device", o.text_device == Device::cuda ? "cuda" : "cpu"},
      {"device", gpu ? "cuda" : "cpu"},
      {"device_name", ctx.device_name},
      {"ranks", ctx.ranks},
      {"timings", timings_json(r)},
      {"time_to_mp4_s", r.time_to_mp4()},
      {"loads", loads_json(r)},
      {"peak_memory_bytes", peaks_json(r)},
      {"phase_windows", windows_json(r)},
      {"host_rss_peak_bytes", host_peaks_json(r)},
      {"prompt_tokens", r.prompt_tokens},
      {"output", r.out_path},
      {"wrote_mp4", r.wrote_mp4},
      {"latents_fnv1a",
       {{"video", fmt::format("{:016x}", ctx.video_latents_hash)},
        {"audio", fmt::format("{:016x}", ctx.audio_latents_hash)}}},
  };
  if (gpu) j["memory_plan"] = r.memory_plan.to_json();
  if (!q.loras.empty()) j["lora_digest"] = fmt::format("{:016x}", r.lora_digest);
  // Each DiT call's seconds (pipeline/generator.h): the median against h3 bench's forward, the first's tuning.
  if (!r.call_seconds.empty())
    j["dit_calls"] = {{"seconds", r.call_seconds},
                      {"forward_seconds", r.forward_seconds},
                      {"median_s", r.median_call_seconds()},
                      {"first_s", r.call_seconds[0]}};
  // Previews while denoising (their time is inside the denoise's): how many, how long (issue 39's 2 % budget).
  if (r.previews > 0) j["previews"] = {{"count", r.previews}, {"seconds", r.preview_seconds}};
  return j;
}

}  // namespace h3

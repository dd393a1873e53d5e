// The machine-readable record of one request: `h3 generate --json FILE` writes it, `h3 serve` puts its timing and
// memory parts in a job's result. Time to MP4 excludes weight loading (and LoRA merges); loads are listed apart with
// their GB/s.
#pragma once
#include <nlohmann/json.hpp>
#include <string>

#include "pipeline/generator.h"

namespace h3 {

// {"load": s, "encode": s, ...} in the order run.
nlohmann::json timings_json(const GenerateResult& r);
// [{"model", "seconds", "file_bytes", "device_bytes", "gb_per_s"}, ...]
nlohmann::json loads_json(const GenerateResult& r);
// {"encode": bytes, "denoise": bytes, ...} (GPU runs; empty on the CPU)
nlohmann::json peaks_json(const GenerateResult& r);
// Per phase: [start, end] in unix seconds, and the peak host RSS (rank 0).
nlohmann::json windows_json(const GenerateResult& r);
nlohmann::json host_peaks_json(const GenerateResult& r);

struct RecordContext {
  std::string device_name;  // backend/backend.h gpu_description(), or "CPU"
  int ranks = 1;
  uint64_t video_latents_hash = 0, audio_latents_hash = 0;  // FNV-1a of the final latents' bytes
};

// Everything: the request's geometry (resolution, frames, steps, mode, seed), precisions, device, ranks, timings,
// time_to_mp4_s, loads, peak memory per phase, the memory plan, prompt tokens, the output and the latents' hashes.
nlohmann::json generate_record(const GenerateResult& r, const GenerateOptions& o, const RecordContext& ctx);

}  // namespace h3

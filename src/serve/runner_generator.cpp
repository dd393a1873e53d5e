// The real job runner: pipeline/generator.h's Generator, loaded once per rank group.
#include <filesystem>

#include "backend/backend.h"
#include "pipeline/run_record.h"
#include "serve/runner.h"

namespace h3::serve {

namespace {

class GeneratorRunner : public JobRunner {
 public:
  GeneratorRunner(const RunnerOptions& o, Comm& comm) : gen_(o.paths, options(o, comm)) {}
  ModelLimits limits() const override { return gen_.limits(); }
  nlohmann::json describe() const override {
    nlohmann::json d = gen_.describe();
    if (gen_.procedural()) d.push_back(procedural_models_notice());
    return d;
  }
  std::string notice() const override { return gen_.procedural() ? procedural_models_notice() : ""; }
  nlohmann::json run(const ResolvedRequest& req, const std::string& out_path, const ProgressFn& progress,
                     const std::atomic<bool>* cancel, const RunHooks& hooks) override {
    GenerateResult r = gen_.run(req, out_path, progress, cancel, nullptr, &hooks);
    // Time to MP4 excludes loads: a server whose models stay resident shows none after its first job.
    nlohmann::json j = {{"prompt_tokens", r.prompt_tokens},
                        {"vision_rows", r.vision_rows},
                        {"precision", std::string(precision_name(r.precision))},
                        {"timings", timings_json(r)},
                        {"time_to_mp4_s", r.time_to_mp4()},
                        {"loads", loads_json(r)},
                        {"wrote_mp4", r.wrote_mp4}};
    if (!r.peaks.empty()) j["peak_memory_bytes"] = peaks_json(r);
    if (!r.request.loras.empty()) j["lora_digest"] = fmt::format("{:016x}", r.lora_digest);
    j["lora_remerged"] = r.lora_remerged;
    if (r.previews > 0) j["previews"] = {{"count", r.previews}, {"seconds", r.preview_seconds}};
    if (latents_ && !out_path.empty())
      j["latents_file"] = std::filesystem::path(out_path).replace_extension(".latents.safetensors").filename().string();
    return j;
  }

 private:
  GenerateOptions options(const RunnerOptions& o, Comm& comm) {
    const Device device = o.device == "cuda" ? Device::cuda : Device::cpu;
    GenerateOptions g = generate_options_from(
        device, {o.precision, o.vae_precision, o.text_precision, o.text_device, o.memory, o.host_memory});
    check_generate_options(g);
    g.dist.mode = dist_mode_from_name(o.mode);
    g.dist.tp = o.tp;
    g.dist.chunks = o.chunks;
    g.dist.transport = o.transport;
    if (device == Device::cuda) g.dist.gpu_bus = gpu_bus_id();
    g.encoder_ranks = o.encoder_ranks;
    g.comm = &comm;
    g.write_latents = o.write_latents;
    latents_ = o.write_latents;
    return g;
  }
  bool latents_ = false;
  Generator gen_;
};

}  // namespace

std::unique_ptr<JobRunner> make_generator_runner(const RunnerOptions& options, Comm& comm) {
  return std::make_unique<GeneratorRunner>(options, comm);
}

}  // namespace h3::serve

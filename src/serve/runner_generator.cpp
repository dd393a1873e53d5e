// The real job runner: pipeline/generator.h's Generator, loaded once per rank group.
#include <filesystem>

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
                     const std::atomic<bool>* cancel) override {
    GenerateResult r = gen_.run(req, out_path, progress, cancel);
    nlohmann::json timings = nlohmann::json::object();
    for (const auto& t : r.timings) timings[t.phase] = t.seconds;
    nlohmann::json j = {{"prompt_tokens", r.prompt_tokens},
                        {"vision_rows", r.vision_rows},
                        {"timings", timings},
                        {"wrote_mp4", r.wrote_mp4}};
    if (!r.request.loras.empty()) j["lora_digest"] = fmt::format("{:016x}", r.lora_digest);
    j["lora_remerged"] = r.lora_remerged;
    if (latents_ && !out_path.empty())
      j["latents_file"] = std::filesystem::path(out_path).replace_extension(".latents.safetensors").filename().string();
    return j;
  }

 private:
  GenerateOptions options(const RunnerOptions& o, Comm& comm) {
    GenerateOptions g;
    g.precision = precision_from_name(o.precision);
    g.dist.mode = dist_mode_from_name(o.mode);
    g.dist.tp = o.tp;
    g.dist.chunks = o.chunks;
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

// The fake job runner: the collective shape of a generation without models. Every step all ranks agree on the
// control word (so cancellation behaves like the Generator's), each rank computes its share of a seeded
// "latent" vector, and rank 0 writes a small MP4-shaped file (ftyp + mdat with the latents). For the server's
// tests only.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <fstream>
#include <thread>

#include "core/knobs.h"
#include "core/log.h"
#include "dist/control.h"
#include "dist/partition.h"
#include "serve/runner.h"

namespace h3::serve {

FaultSpec FaultSpec::parse(const std::string& s) {
  FaultSpec f;
  if (s.empty()) return f;
  char what[16] = {0};
  if (std::sscanf(s.c_str(), "%d:%d:%15s", &f.rank, &f.step, what) != 3 || f.rank < 0 || f.step < 0 ||
      (std::string(what) != "kill" && std::string(what) != "stall"))
    fail("debug fault '{}': expected RANK:STEP:kill or RANK:STEP:stall", s);
  f.kill = std::string(what) == "kill";
  return f;
}

void FaultSpec::at_step(int rank_now, int step_now) const {
  if (rank_now != rank || step_now != step) return;
  spdlog::warn("debug fault: rank {} {} at step {}", rank, kill ? "killing itself" : "stalling", step);
  if (kill) std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

nlohmann::json limits_to_json(const ModelLimits& l) {
  return {{"canvas_multiple", l.canvas_multiple},
          {"vae_spatial_ratio", l.vae_spatial_ratio},
          {"min_frames", l.min_frames},
          {"max_frames", l.max_frames},
          {"max_canvas_pixels", l.max_canvas_pixels},
          {"min_steps", l.min_steps},
          {"max_steps", l.max_steps},
          {"max_references", l.max_references},
          {"ref_image_short_edge", l.ref_image_short_edge},
          {"ref_video_short_edge", l.ref_video_short_edge},
          {"ref_video_max_pixels", l.ref_video_max_pixels},
          {"audio_hop", l.audio_hop},
          {"audio_sample_rate", l.audio_sample_rate}};
}

ModelLimits limits_from_json(const nlohmann::json& j) {
  ModelLimits l;
  l.canvas_multiple = j.value("canvas_multiple", l.canvas_multiple);
  l.vae_spatial_ratio = j.value("vae_spatial_ratio", l.vae_spatial_ratio);
  l.min_frames = j.value("min_frames", l.min_frames);
  l.max_frames = j.value("max_frames", l.max_frames);
  l.max_canvas_pixels = j.value("max_canvas_pixels", l.max_canvas_pixels);
  l.min_steps = j.value("min_steps", l.min_steps);
  l.max_steps = j.value("max_steps", l.max_steps);
  l.max_references = j.value("max_references", l.max_references);
  l.ref_image_short_edge = j.value("ref_image_short_edge", l.ref_image_short_edge);
  l.ref_video_short_edge = j.value("ref_video_short_edge", l.ref_video_short_edge);
  l.ref_video_max_pixels = j.value("ref_video_max_pixels", l.ref_video_max_pixels);
  l.audio_hop = j.value("audio_hop", l.audio_hop);
  l.audio_sample_rate = j.value("audio_sample_rate", l.audio_sample_rate);
  return l;
}

namespace {

class FakeRunner : public JobRunner {
 public:
  FakeRunner(const RunnerOptions& o, Comm& comm) : o_(o), comm_(comm) {
    std::this_thread::sleep_for(std::chrono::milliseconds(o.fake_load_ms));
    comm_.barrier("fake runner load");
  }
  ModelLimits limits() const override { return ModelLimits::released(); }
  nlohmann::json describe() const override { return {"fake runner (no models; server tests only)"}; }

  nlohmann::json run(const ResolvedRequest& req, const std::string& out_path, const ProgressFn& progress,
                     const std::atomic<bool>* cancel) override {
    const auto t0 = std::chrono::steady_clock::now();
    const FaultSpec fault = FaultSpec::parse(debug_fault());
    const int steps = req.model_calls;
    const int decode_chunks = 3;
    const int total = steps + decode_chunks;
    auto report = [&](const std::string& phase, int step, int n, int done_units) {
      if (!progress || comm_.rank() != 0) return;
      const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const double pct = 100.0 * done_units / (total + 1);
      progress({phase, step, n, pct, done_units > 0 ? el / done_units * (total + 1 - done_units) : -1});
    };
    auto agree_continue = [&](const std::string& where) {
      const bool stop = comm_.rank() == 0 && cancel && cancel->load();
      if (step_control(comm_, stop ? ControlWord::cancel : ControlWord::proceed) == ControlWord::cancel)
        throw Cancelled("cancelled " + where);
    };
    // Each rank owns a contiguous share of the latent vector (quotient/remainder rule) and fills it per step.
    const int64_t n = 4096;
    const Range own = part_of(n, comm_.size(), comm_.rank());
    std::vector<float> mine(static_cast<size_t>(own.end - own.begin), 0.0f);
    report("encode", 0, 1, 0);
    for (int s = 0; s < steps; ++s) {
      agree_continue(fmt::format("at denoising step {} of {}", s + 1, steps));
      fault.at_step(comm_.rank(), s);
      std::this_thread::sleep_for(std::chrono::milliseconds(o_.fake_step_ms));
      for (int64_t i = own.begin; i < own.end; ++i) {
        uint64_t h = (req.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1)) ^ static_cast<uint64_t>(s);
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ull;
        mine[static_cast<size_t>(i - own.begin)] += static_cast<float>(h >> 40) / static_cast<float>(1 << 24);
      }
      report("denoise", s + 1, steps, s + 1);
    }
    std::vector<float> all(static_cast<size_t>(n));
    const std::vector<int64_t> counts = part_sizes(partition(n, comm_.size(), "fake latents"));
    comm_.allgatherv(mine.data(), all.data(), counts, DType::f32, "fake latents");
    for (int c = 0; c < decode_chunks; ++c) {
      agree_continue(fmt::format("in the video decode (chunk {} of {})", c + 1, decode_chunks));
      std::this_thread::sleep_for(std::chrono::milliseconds(o_.fake_step_ms / 2));
      report("decode_video", c + 1, decode_chunks, steps + c + 1);
    }
    nlohmann::json result = {{"fake", true}, {"latent_values", n}};
    if (comm_.rank() == 0 && !out_path.empty()) {
      report("write", 0, 1, total);
      write_fake_mp4(out_path, all);
    }
    report("done", 1, 1, total + 1);
    return result;
  }

 private:
  static void put32(std::string& s, uint32_t v) {
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  static void write_fake_mp4(const std::string& path, const std::vector<float>& latents) {
    std::string f;
    put32(f, 20);
    f += "ftypisom";
    put32(f, 0x200);
    f += "isom";
    put32(f, static_cast<uint32_t>(8 + latents.size() * sizeof(float)));
    f += "mdat";
    f.append(reinterpret_cast<const char*>(latents.data()), latents.size() * sizeof(float));
    const std::string tmp = path + ".partial";
    std::ofstream os(tmp, std::ios::binary);
    os.write(f.data(), static_cast<std::streamsize>(f.size()));
    os.close();
    if (!os || std::rename(tmp.c_str(), path.c_str()) != 0) {
      std::remove(tmp.c_str());
      fail("fake runner: cannot write {} (is the disk full?)", path);
    }
  }
  RunnerOptions o_;
  Comm& comm_;
};

}  // namespace

std::unique_ptr<JobRunner> make_fake_runner(const RunnerOptions& options, Comm& comm) {
  return std::make_unique<FakeRunner>(options, comm);
}

}  // namespace h3::serve

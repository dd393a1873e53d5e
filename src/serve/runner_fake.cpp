// The fake job runner: the collective shape of a generation without models. Every step all ranks agree on the
// control word (so cancellation behaves like the Generator's), each rank computes its share of a seeded
// "latent" vector, and rank 0 writes a real, small MP4 made from the gathered values (an eighth of the canvas,
// every frame, a tone for sound), so that clients can play it and the server can make its thumbnail. A build
// without FFmpeg writes an MP4-shaped stand-in (ftyp + mdat with the values) instead. For the server's tests
// and the examples only.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <thread>

#include "core/hash.h"
#include "core/knobs.h"
#include "core/log.h"
#include "core/signals.h"
#include "distributed/control.h"
#include "distributed/partition.h"
#include "media/mp4_writer.h"
#include "serve/runner.h"

namespace h3 {

// ModelLimits <-> JSON, field for field under the same names; a field a JSON object lacks keeps its default.
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ModelLimits, canvas_multiple, vae_spatial_ratio, min_frames, max_frames,
                                                max_canvas_pixels, min_steps, max_steps, max_references,
                                                ref_image_short_edge, ref_video_short_edge, ref_video_max_pixels,
                                                audio_hop, audio_sample_rate)

}  // namespace h3

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
  kill_or_stall(kill);
}

nlohmann::json limits_to_json(const ModelLimits& l) {
  return l;
}

ModelLimits limits_from_json(const nlohmann::json& j) {
  return j.get<ModelLimits>();
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
  std::string notice() const override {
    return "The fake runner (--runner fake) runs no model: every video is a test pattern. Start h3 serve "
           "without --runner fake (and with --model-dir DIR) for real videos.";
  }

  nlohmann::json run(const ResolvedRequest& req, const std::string& out_path, const ProgressFn& progress,
                     const std::atomic<bool>* cancel, const RunHooks& hooks) override {
    auto t0 = std::chrono::steady_clock::now();
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
    // Each rank owns a contiguous share of the latent vector (quotient/remainder rule) and fills it per step; a
    // suspended run keeps its share and step (FakeState) and goes on from them.
    const int64_t n = 4096;
    const Range own = part_of(n, comm_.size(), comm_.rank());
    std::vector<float> mine(static_cast<size_t>(own.end - own.begin), 0.0f);
    int start = 0;
    if (hooks.resume) {
      const auto* st = dynamic_cast<const FakeState*>(hooks.resume.get());
      H3_CHECK(st && st->mine.size() == mine.size(), "fake runner: the state to resume is not a fake run's");
      mine = st->mine;
      start = st->steps_done;
      t0 -=
          std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(st->elapsed_s));
    }
    report("encode", 0, 1, 0);
    for (int s = start; s < steps; ++s) {
      const bool stop = comm_.rank() == 0 && cancel && cancel->load();
      const bool pause = comm_.rank() == 0 && hooks.suspend && hooks.suspend->load();
      const ControlWord w = step_control(comm_, stop    ? ControlWord::cancel
                                                : pause ? ControlWord::suspend
                                                        : ControlWord::proceed);
      if (w == ControlWord::cancel) throw Cancelled(fmt::format("cancelled at denoising step {} of {}", s + 1, steps));
      if (w == ControlWord::suspend) {
        auto st = std::make_shared<FakeState>();
        st->steps_done = s;
        st->steps = steps;
        st->mine = mine;
        st->elapsed_s = seconds_since(t0);
        throw Suspended(fmt::format("suspended after {} of {} denoising steps", s, steps), std::move(st));
      }
      fault.at_step(comm_.rank(), s);
      std::this_thread::sleep_for(std::chrono::milliseconds(o_.fake_step_ms));
      for (int64_t i = own.begin; i < own.end; ++i) {
        uint64_t h = (req.seed + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(i + 1)) ^ static_cast<uint64_t>(s);
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ull;
        mine[static_cast<size_t>(i - own.begin)] += static_cast<float>(h >> 40) / static_cast<float>(1 << 24);
      }
      if (comm_.rank() == 0 && hooks.preview && hooks.preview_every > 0 && (s + 1) % hooks.preview_every == 0 &&
          s + 1 < steps)
        hooks.preview(preview(req, mine, s + 1, steps));
      report("denoise", s + 1, steps, s + 1);
    }
    const double denoise_s = seconds_since(t0);
    std::vector<float> all(static_cast<size_t>(n));
    const std::vector<int64_t> counts = part_sizes(partition(n, comm_.size(), "fake latents"));
    comm_.allgatherv(mine.data(), all.data(), counts, DType::f32, "fake latents");
    for (int c = 0; c < decode_chunks; ++c) {
      agree_continue(fmt::format("in the video decode (chunk {} of {})", c + 1, decode_chunks));
      std::this_thread::sleep_for(std::chrono::milliseconds(o_.fake_step_ms / 2));
      report("decode_video", c + 1, decode_chunks, steps + c + 1);
    }
    nlohmann::json result = {{"fake", true},
                             {"latent_values", n},
                             {"latent_hash", fmt::format("{:016x}", fnv1a(all.data(), all.size() * sizeof(float)))}};
    if (comm_.rank() == 0 && !out_path.empty()) {
      report("write", 0, 1, total);
      if (media_library_versions().empty())
        write_stand_in(out_path, all);
      else
        write_mp4(out_path, req, all);
    }
    report("done", 1, 1, total + 1);
    // The phases as the Generator reports them (the denoise includes the gather; decode and write together).
    result["timings"] = {{"denoise", denoise_s}, {"decode_video", seconds_since(t0) - denoise_s}};
    return result;
  }

 private:
  // A fake run stopped at a step boundary: this rank's share of the values and the time spent.
  struct FakeState : SuspendedRun {
    std::vector<float> mine;
    double elapsed_s = 0;
  };
  // A preview of the fake run: a sixteenth of the canvas, a colour field from rank 0's values that brightens with
  // the steps (a test pattern like the video; no model ran).
  static PreviewPicture preview(const ResolvedRequest& req, const std::vector<float>& v, int step, int steps) {
    PreviewPicture p;
    p.step = step;
    p.steps = steps;
    const int64_t W = std::max<int64_t>(8, req.width / 16), H = std::max<int64_t>(8, req.height / 16);
    p.picture = Tensor(DType::f32, {3, H, W});
    float* d = p.picture.data<float>();
    const float level = static_cast<float>(step) / static_cast<float>(std::max(steps, 1));
    for (int64_t c = 0; c < 3; ++c)
      for (int64_t y = 0; y < H; ++y)
        for (int64_t x = 0; x < W; ++x) {
          const float base =
              v.empty() ? 0.5f : std::fmod(std::abs(v[static_cast<size_t>((c * 131 + x) % v.size())]), 1.0f);
          d[(c * H + y) * W + x] = std::clamp(0.2f * base + 0.8f * level * static_cast<float>(y + 1) / H, 0.0f, 1.0f);
        }
    return p;
  }
  static double seconds_since(std::chrono::steady_clock::time_point t0) {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  // An eighth of the canvas (even sides), every frame of the request: a colour field from the gathered values
  // with a bar sweeping across, and a quiet tone; encoded fast (x264 ultrafast) in slices of 17 frames.
  static void write_mp4(const std::string& path, const ResolvedRequest& req, const std::vector<float>& v) {
    MediaSpec spec;
    spec.width = std::max<int64_t>(16, req.width / 16 * 2);
    spec.height = std::max<int64_t>(16, req.height / 16 * 2);
    spec.x264_preset = "ultrafast";
    spec.crf = 30;
    spec.audio_bitrate = 64000;
    spec.metadata["comment"] = "h3 serve fake runner (no model ran)";
    Mp4Writer w(path, spec);
    const int64_t W = spec.width, H = spec.height, slice = 17;
    for (int64_t t0 = 0; t0 < req.frames; t0 += slice) {
      const int64_t T = std::min(slice, req.frames - t0);
      Tensor px(DType::f32, {3, T, H, W});
      float* p = px.data<float>();
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t t = 0; t < T; ++t) {
          const int64_t frame = t0 + t, bar = frame * W / req.frames;
          const float base = std::fmod(v[static_cast<size_t>(c * 997 % static_cast<int64_t>(v.size()))], 1.0f);
          for (int64_t y = 0; y < H; ++y)
            for (int64_t x = 0; x < W; ++x)
              p[((c * T + t) * H + y) * W + x] =
                  std::abs(x - bar) < 2 ? 1.0f
                                        : 0.25f + 0.5f * base * static_cast<float>(y + 1) / static_cast<float>(H);
        }
      w.add_frames(px);
    }
    const int64_t samples = req.frames * spec.sample_rate / 24;
    Tensor wave(DType::f32, {2, samples});
    float* a = wave.data<float>();
    const double hz = 220.0 * (1.0 + std::fmod(std::abs(static_cast<double>(v[0])), 1.0));
    for (int64_t i = 0; i < samples; ++i)
      a[i] = a[samples + i] =
          0.1f * static_cast<float>(std::sin(2 * M_PI * hz * static_cast<double>(i) / spec.sample_rate));
    w.add_audio(wave);
    w.finish();
  }
  static void put32(std::string& s, uint32_t v) {
    for (int k = 3; k >= 0; --k) s.push_back(static_cast<char>((v >> (8 * k)) & 0xff));
  }
  static void write_stand_in(const std::string& path, const std::vector<float>& latents) {
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

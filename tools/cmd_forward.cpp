// h3 forward: one DiT forward on a real packed layout with seeded inputs, and a short report. The default runs the
// procedural mini model, so it needs no download.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>

#include "backend/backend.h"
#include "commands.h"
#include "core/compare.h"
#include "core/error.h"
#include "core/parallel.h"
#include "distributed/comm.h"
#include "distributed/plan.h"
#include "io/safetensors.h"
#include "model/dit/lora.h"
#include "pipeline/synthetic.h"

namespace h3::cli {

namespace {
double rms(const Tensor& t) {
  long double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get(i) * t.get(i);
  return t.numel() ? std::sqrt(static_cast<double>(s / t.numel())) : 0.0;
}
}  // namespace

Runner add_run(CLI::App& app) {
  auto* cmd = app.add_subcommand("forward", "one DiT forward on a seeded request and a short report");
  struct Opts {
    std::string model = "procedural:mini", precision = "f32", mode = "ulysses", dump;
    int tp = 1, chunks = 1, reps = 1;
    std::vector<std::string> loras;
    SyntheticRequest req;
  };
  auto o = std::make_shared<Opts>();
  add(cmd, opt::dit_checkpoint, o->model);
  add(cmd, opt::precision, o->precision);
  add(cmd, opt::frames, o->req.num_frames);
  add(cmd, opt::height, o->req.height);
  add(cmd, opt::width, o->req.width);
  cmd->add_option("--text-tokens", o->req.num_text, "prompt rows")->check(CLI::Range(1, 4096))->capture_default_str();
  add(cmd, opt::seed, o->req.seed);
  add_dist(cmd, o->mode, o->tp, o->chunks);
  add(cmd, opt::lora, o->loras);
  cmd->add_option("--dump-output", o->dump, "write the outputs to this .safetensors file (rank 0)");
  add(cmd, opt::reps, o->reps);
  return [o](const GlobalContext& ctx) -> int {
    // Short clips are allowed here (the procedural mini model is a test bed); long ones are refused like requests.
    if (align_num_frames(o->req.num_frames) > kMaxRequestFrames)
      fail("--frames {}: at most {} frames (15 s at 24 fps) are allowed", o->req.num_frames, kMaxRequestFrames);
    using clock = std::chrono::steady_clock;
    auto t0 = clock::now();
    DitCheckpoint ck = DitCheckpoint::open(o->model);
    Comm& w = world();
    add_loras(ck, o->loras, w.rank());
    DistPlan plan =
        w.size() > 1
            ? DistPlan::make(
                  w, {dist_mode_from_name(o->mode), o->tp, o->chunks, ctx.cuda() ? gpu_bus_id() : "", ctx.transport},
                  ck.config().num_attention_heads, ck.config().ffn_dim)
            : DistPlan::single();
    DitModel model(ck, precision_from_name(o->precision), plan, ctx.compute_device(), ctx.numerics());
    auto t1 = clock::now();
    DitInputs in = make_synthetic_inputs(ck.config(), o->req);
    auto t2 = clock::now();
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    DitOutputs out = model.forward(in);
    gpu_synchronize();
    auto t3 = clock::now();
    double forward_ms = ms(t2, t3);
    if (o->reps > 1) {
      std::vector<double> times;
      for (int r = 1; r < o->reps; ++r) {
        w.barrier("forward repetition");
        const auto a = clock::now();
        out = model.forward(in);
        gpu_synchronize();
        times.push_back(ms(a, clock::now()));
      }
      std::sort(times.begin(), times.end());
      forward_ms = times[times.size() / 2];
    }
    if (w.rank() != 0) return 0;
    if (!o->dump.empty()) write_safetensors(o->dump, {{"video", out.video}, {"audio", out.audio}});
    const DitConfig& c = ck.config();
    std::printf("h3 forward: %s, %s, %d threads per rank\n", o->model.c_str(), o->precision.c_str(), cpu_threads());
    if (w.size() > 1) std::printf("  ranks       %s\n", plan.describe().c_str());
    std::printf("  model       %d blocks, %d heads x %d, hidden %d (%.3f B parameters)\n", c.num_layers,
                c.num_attention_heads, c.attention_head_dim, c.hidden_size, c.parameter_count() / 1e9);
    std::printf(
        "  request     %lld frames at %lldx%lld, %lld text rows -> packed length S = %lld "
        "(video %lld, audio %lld rows)\n",
        static_cast<long long>(o->req.num_frames), static_cast<long long>(o->req.height),
        static_cast<long long>(o->req.width), static_cast<long long>(o->req.num_text),
        static_cast<long long>(in.seq_len()), static_cast<long long>(in.video.dim(0)),
        static_cast<long long>(in.audio.dim(0)));
    std::printf("  output      video %s rms %.6f, audio %s rms %.6f\n", shape_str(out.video.shape()).c_str(),
                rms(out.video), shape_str(out.audio.shape()).c_str(), rms(out.audio));
    std::printf("  time        load %.1f ms, inputs %.1f ms, forward %.1f ms%s\n", ms(t0, t1), ms(t1, t2), forward_ms,
                o->reps > 1 ? fmt::format(" (median of {} after a warm-up)", o->reps - 1).c_str() : "");
    const bool finite = std::isfinite(rms(out.video)) && std::isfinite(rms(out.audio));
    std::printf("%s\n", finite ? "OK" : "FAIL: non-finite output");
    return finite ? 0 : 1;
  };
}

}  // namespace h3::cli

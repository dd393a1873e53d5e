// h3 parity FILE --mode M --ranks N: the file's cases on 1 rank and on N ranks; max-abs, rel-L2, bitwise, and the
// golden comparison of the N-rank run. PASS needs bitwise equality in ulysses / ulysses-ag and rel-L2 <= 1e-6
// (f32; 1e-12 in f64) in tensor / hybrid.
#include <memory>

#include "backend/backend.h"
#include "commands.h"
#include "core/compare.h"
#include "core/log.h"
#include "distributed/comm.h"
#include "model/dit/lora.h"
#include "verify/dit.h"

namespace h3::cli {

namespace {
struct Opts {
  std::string file, mode = "ulysses", precision = "f32", weights;
  int tp = 1, chunks = 1;
  std::vector<std::string> loras;
};
}  // namespace

Runner add_parity(CLI::App& app) {
  auto* cmd = app.add_subcommand("parity", "compare an N-rank run with the 1-rank run on a golden DiT file");
  auto o = std::make_shared<Opts>();
  cmd->add_option("file", o->file, "golden DiT file")->required();
  add(cmd, opt::precision, o->precision);
  add(cmd, opt::weights, o->weights);
  add(cmd, opt::lora, o->loras);
  add_dist(cmd, o->mode, o->tp, o->chunks);
  return [o](const GlobalContext& ctx) -> int {
    Comm& w = world();
    SafeTensors f = SafeTensors::open(o->file);
    if (!looks_like_dit_golden(f)) fail("{}: not a DiT golden file (parity runs DiT cases)", o->file);
    const DistMode mode = dist_mode_from_name(o->mode);
    const Precision prec = precision_from_name(o->precision);
    const Device dev = ctx.compute_device();
    DitCheckpoint ck = dit_golden_weights(f, o->weights);
    add_loras(ck, o->loras, w.rank());
    // The 1-rank reference first, on rank 0, and freed before the distributed model exists (peak memory).
    std::vector<std::string> cases = dit_golden_cases(f);
    std::vector<DitOutputs> reference;
    if (w.rank() == 0) {
      DitModel single(ck, prec, DistPlan::single(), dev, ctx.numerics());
      for (const auto& c : cases) reference.push_back(single.forward(dit_golden_inputs(f, c)));
    }
    w.barrier("parity: reference done");
    DistPlan plan = DistPlan::make(w, {mode, o->tp, o->chunks, dev == Device::cuda ? gpu_bus_id() : "", ctx.transport},
                                   ck.config().num_attention_heads, ck.config().ffn_dim);
    DitModel dist(ck, prec, plan, dev, ctx.numerics());
    const bool exact = mode == DistMode::ulysses || mode == DistMode::ulysses_ag;
    // Tensor parallelism changes the reduction order; on the GPU the bf16 partial sums are rounded before they are
    // added, so the GPU bound is the bf16 recipe's own error scale.
    const double tol = prec == Precision::f64   ? 1e-12
                       : prec == Precision::f32 ? 1e-6
                       : dev == Device::cuda    ? 8e-3
                                                : 1e-3;
    bool pass = true;
    if (w.rank() == 0) {
      std::printf("parity %s: %s, %s on the %s%s\n", o->file.c_str(), plan.describe().c_str(), o->precision.c_str(),
                  dev == Device::cuda ? "GPU" : "CPU", ctx.deterministic() ? " (deterministic)" : "");
      std::printf("%-16s %12s %12s %8s %14s  %s\n", "output", "rel_l2", "max_abs", "bitwise", "golden rel_l2",
                  "result");
    }
    for (size_t ci = 0; ci < cases.size(); ++ci) {
      const std::string& c = cases[ci];
      DitOutputs d = dist.forward(dit_golden_inputs(f, c));
      if (w.rank() != 0) continue;
      const DitOutputs& s = reference[ci];
      for (auto [name, a, b] : {std::tuple{"video", &d.video, &s.video}, std::tuple{"audio", &d.audio, &s.audio}}) {
        Diff diff = compare(*a, *b);
        std::string gk = (c.empty() ? "" : c + ".") + "output.f64." + name;
        double golden = f.has(gk) ? compare(*a, f.get(gk)).rel_l2 : -1;
        bool ok = exact ? diff.bitwise : diff.rel_l2 <= tol;
        pass &= ok;
        std::printf("%-16s %12.3e %12.3e %8s %14.3e  %s\n", ((c.empty() ? "" : c + " ") + name).c_str(), diff.rel_l2,
                    diff.max_abs, diff.bitwise ? "yes" : "no", golden, ok ? "ok" : "FAIL");
      }
    }
    if (w.rank() == 0) {
      if (pass)
        std::printf("PASS: %s on %d ranks %s the 1-rank run\n", o->mode.c_str(), w.size(),
                    exact ? "is bitwise identical to" : "is within tolerance of");
      else
        std::printf("FAIL: %s on %d ranks differs from the 1-rank run\n", o->mode.c_str(), w.size());
    }
    // Every rank returns rank 0's verdict.
    int32_t verdict = pass ? 0 : 1;
    w.broadcast(&verdict, sizeof(verdict), 0, "parity verdict");
    return verdict;
  };
}

}  // namespace h3::cli

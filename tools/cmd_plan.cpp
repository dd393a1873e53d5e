// h3 plan [MODEL]: what fits where. For a checkpoint (headers only; procedural:full by default), precisions, sizes and
// a rank count, the memory plan (pipeline/memory_plan.h) on cards of 12 / 16 / 24 / 32 / 48 / 80 GiB or on the given
// budgets: whether the job fits, what each phase keeps resident and streams, the host memory it needs and the
// expected slowdown from the host link. Needs no GPU; a table in markdown (or --json).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <vector>

#include "commands.h"
#include "core/byte_size.h"
#include "core/error.h"
#include "options.h"
#include "pipeline/components.h"
#include "pipeline/memory_plan.h"
#include "pipeline/request.h"
#include "pipeline/residency.h"

namespace h3::cli {

namespace {

struct PlanOpts {
  ModelPaths paths;
  std::vector<std::string> precisions{"bf16", "fp8"}, sizes{"480p", "768p"}, budgets;
  std::string memory = "phases", mode = "ulysses", text_precision = "bf16", vae_precision = "bf16";
  std::string host_memory;
  int tp = 1, chunks = 1, steps = 50;
  int64_t frames = 124;
  double link_gbps = kH200LinkGBps;
  std::string json_out;  // "-": the JSON on stdout instead of the table
  bool json() const { return !json_out.empty(); }
};

// "480p", "768p" or "WxH".
std::pair<int64_t, int64_t> size_of(const std::string& s) {
  if (s == "480p") return {832, 480};
  if (s == "768p") return {1344, 768};
  const size_t x = s.find('x');
  try {
    if (x != std::string::npos) return {std::stoll(s.substr(0, x)), std::stoll(s.substr(x + 1))};
  } catch (const std::exception&) {
  }
  fail("--size {}: expected 480p (832x480), 768p (1344x768) or WIDTHxHEIGHT", s);
}

double gib(int64_t b) {
  return static_cast<double>(b) / static_cast<double>(kGiB);
}

// One budget to plan against: a card of `card` bytes (its default budget) or a budget given as such.
struct Target {
  std::string label;
  int64_t device = 0, budget = 0;
};

std::vector<Target> targets_of(const PlanOpts& o) {
  std::vector<Target> t;
  if (o.budgets.empty()) {
    for (int g : {12, 16, 24, 32, 48, 80}) t.push_back({fmt::format("{} GiB", g), g * kGiB, 0});
    return t;
  }
  for (const std::string& b : o.budgets) {
    const int64_t bytes = parse_byte_size_or_fail(b, "--budget");
    t.push_back({"budget " + format_byte_size(bytes), bytes, bytes});
  }
  return t;
}

std::string layers_cell(const LayerResidency& r) {
  if (r.layers == 0) return "-";
  return r.streamed() == 0 ? fmt::format("all {}", r.layers) : fmt::format("{} of {}", r.resident, r.layers);
}

double gib_up(int64_t b) {
  return std::ceil(gib(b) * 10.0) / 10.0;
}

constexpr const char* kTableHead =
    "| card | budget GiB | fits | encode: text layers resident | streamed GiB | denoise: DiT blocks resident | "
    "streamed GiB a forward | decode: VAE units a batch | peak GiB | pinned host GiB | host GiB | link s a forward | "
    "slowdown s a request (% of denoise) |\n"
    "|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n";

// One row of the table: card, budget, fits, per phase what is resident and streamed, host memory, link time and the
// expected slowdown.
std::string row_of(const Target& t, const MemoryPlan& m, double compute_total) {
  if (!m.fits)
    return fmt::format("| {} | {:.1f} | no: needs {:.1f} GiB | | | | | | | | | | |", t.label, gib(m.budget_bytes),
                       gib_up(m.minimum_bytes));
  const PhaseMemory &enc = m.phase("encode"), &den = m.phase("denoise");
  int64_t pinned = 0;
  for (const PhaseMemory& ph : m.phases) pinned = std::max(pinned, ph.host_pool);  // page-locked, the pool included
  const double slow = m.slowdown_s();
  const std::string pct = compute_total > 0 ? fmt::format(" ({:.1f} %)", 100.0 * slow / compute_total) : "";
  return fmt::format(
      "| {} | {:.1f} | yes | {} | {:.1f} | {} | {:.1f} | {} | {:.1f} | {:.1f} | {:.1f} | {:.2f} | {:.1f}{} |", t.label,
      gib(m.budget_bytes), layers_cell(m.text), gib(enc.streamed), layers_cell(m.dit), gib(den.streamed), m.vae.batch,
      gib(m.peak()), gib(pinned), gib(m.host_peak()), den.copy_s, slow, pct);
}

int run_plan(const PlanOpts& o, const GlobalContext& ctx) {
  const int ranks = ctx.ranks;
  const ModelSources src = open_model_sources(o.paths);
  GenerateOptions go;
  go.device = Device::cuda;
  go.text_device = Device::cuda;
  go.text_precision = precision_from_name(o.text_precision);
  go.vae_precision = precision_from_name(o.vae_precision);
  go.memory = memory_policy_from_name(o.memory);
  go.stream_layers = true;
  go.dist.mode = dist_mode_from_name(o.mode);
  go.dist.tp = o.tp;
  const int64_t host = o.host_memory.empty() ? 0 : parse_byte_size_or_fail(o.host_memory, "--host-memory");
  const std::vector<Target> targets = targets_of(o);
  for (const std::string& size : o.sizes) (void)size_of(size);  // every size checked before anything prints
  nlohmann::json all = nlohmann::json::array();
  if (!o.json())
    std::printf(
        "h3 plan %s: %d rank(s)%s, memory plan %s, text tower %s, VAEs %s; link %.1f GB/s (%s); compute per DiT "
        "forward: an H200's (a slower card hides more of the copies); host memory %s\n",
        o.paths.model_dir.c_str(), ranks, ranks > 1 ? (", " + o.mode).c_str() : "", o.memory.c_str(),
        o.text_precision.c_str(), o.vae_precision.c_str(), o.link_gbps,
        o.link_gbps == kH200LinkGBps ? "an H200's pinned host->device copies; --host-link-gbps to change" : "as given",
        host > 0 ? format_byte_size(host).c_str() : "not limited (pinned copies of the streamed weights)");
  for (const std::string& size : o.sizes) {
    for (const std::string& prec : o.precisions) {
      GenerateRequest q;
      q.prompt = std::string(1000, 'x');  // a 1,000-byte prompt, as a server plans for
      std::tie(q.width, q.height) = size_of(size);
      q.frames = o.frames;
      q.steps = o.steps;
      q.seed = 0;
      const ResolvedRequest r = resolve(q, src.limits);
      go.precision = precision_from_name(prec);
      MemoryPlanInputs in = plan_inputs(src, go, r, ranks, 0);
      in.link_gbps = o.link_gbps;
      in.host_bytes = host;
      in.dit_forward_s = h200_dit_forward_seconds(in.dit, in.dit_precision, in.seq_len, in.K, in.U);
      const double compute_total = in.dit_forward_s * in.dit_calls;
      if (!o.json()) {
        std::printf("\n%s (%lldx%lld, %lld frames, %lld packed rows, %d DiT calls), DiT %s", size.c_str(),
                    static_cast<long long>(r.width), static_cast<long long>(r.height), static_cast<long long>(r.frames),
                    static_cast<long long>(in.seq_len), in.dit_calls, prec.c_str());
        if (compute_total > 0)
          std::printf(", %.2f s a forward on an H200 (%.0f s a request)", in.dit_forward_s, compute_total);
        std::printf("\n\n%s", kTableHead);
      }
      std::string minimum;
      for (const Target& t : targets) {
        in.device_bytes = t.device;
        in.budget_bytes = t.budget;
        const MemoryPlan m = plan_memory(in);
        minimum = fmt::format("at least {:.1f} GiB: {}", gib_up(m.minimum_bytes), m.minimum_detail);
        if (o.json())
          all.push_back({{"size", size},
                         {"width", r.width},
                         {"height", r.height},
                         {"frames", r.frames},
                         {"precision", prec},
                         {"ranks", ranks},
                         {"mode", o.mode},
                         {"target", t.label},
                         {"card_bytes", t.budget > 0 ? 0 : t.device},
                         {"dit_forward_s", in.dit_forward_s},
                         {"plan", m.to_json()}});
        else
          std::printf("%s\n", row_of(t, m, compute_total).c_str());
      }
      if (!o.json()) std::printf("\nA rank needs %s.\n", minimum.c_str());
    }
  }
  if (o.json_out == "-") {
    std::printf("%s\n", all.dump(2).c_str());
  } else if (o.json()) {
    std::ofstream js(o.json_out);
    js << all.dump(2) << "\n";
    H3_CHECK(js.good(), "--json {}: cannot write the file", o.json_out);
    std::printf("wrote %s\n", o.json_out.c_str());
  }
  return 0;
}

}  // namespace

Runner add_plan(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "plan", "what fits where: the memory plan of a job on cards of 12-80 GiB (or --budget), from headers only");
  auto o = std::make_shared<PlanOpts>();
  o->paths.model_dir = "procedural:full";
  cmd->add_option("model", o->paths.model_dir, "model folder or procedural:NAME (as generate --model)")
      ->capture_default_str();
  add_component_paths(cmd, o->paths);
  add(cmd, opt::precision, o->precisions);
  cmd->add_option("--size", o->sizes, "480p (832x480), 768p (1344x768) or WxH")->capture_default_str();
  add(cmd, opt::frames, o->frames);
  add(cmd, opt::steps, o->steps);
  add(cmd, opt::text_precision, o->text_precision);
  add(cmd, opt::vae_precision, o->vae_precision);
  add(cmd, opt::memory_plan, o->memory);
  add_dist(cmd, o->mode, o->tp, o->chunks);
  cmd->add_option("--budget", o->budgets,
                  "device budgets per rank to plan for instead of the cards (e.g. 20G 36GiB; as --max-device-memory)");
  cmd->add_option("--host-link-gbps", o->link_gbps, "host -> device copy rate, GB/s")
      ->check(finite_range(0.01, 10000))
      ->capture_default_str();
  add(cmd, opt::host_memory, o->host_memory);
  add(cmd, opt::json, o->json_out);
  return [o](const GlobalContext& ctx) -> int { return run_plan(*o, ctx); };
}

}  // namespace h3::cli

// h3: the command-line front end. Every flag also reads an environment variable H3_<FLAG>; the run-time options of
// core/knobs.h are parsed here, once, from their flags and the environment. Usage errors exit 2 with a "did you
// mean" for misspelt commands and options; `h3 --version` says what was compiled in (cli_habits.h). The options
// several commands take are rows of tools/options.cpp; what the global ones say reaches the command that runs as
// its GlobalContext (commands.h).
#include <cstdio>
#include <map>

#include "backend/backend.h"
#include "cli_habits.h"
#include "commands.h"
#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"
#include "distributed/comm.h"
#include "distributed/comm_device.h"
#include "distributed/launch.h"
#include "distributed/placement.h"

namespace {

// The global options (before or after the command), as parsed.
struct GlobalFlags {
  std::string log_level = "info";
  int ranks = 1;
  double timeout = 120;
  std::string device = "cpu";
  bool deterministic = false;
  std::string transport = "auto";
  bool report_placement = false;
  // The knobs with a flag (core/knobs.h), by knob name: the value given and the option.
  std::map<std::string, std::string> knob_values;
  std::vector<std::pair<std::string, CLI::Option*>> knob_options;
};

// The row of tools/options.cpp of a knob only some commands take (nullptr: a global option).
const h3::cli::OptionDef* command_knob(const std::string& name) {
  for (const h3::cli::OptionDef* d : h3::cli::option_table())
    if (d->knob == name) return d;
  return nullptr;
}

void add_global_options(CLI::App& app, GlobalFlags& g) {
  app.add_option("--log-level", g.log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->envname("H3_LOG_LEVEL");
  app.add_option("--ranks", g.ranks, "run on N ranks (relaunches under mpirun unless already in an MPI job)")
      ->check(CLI::Range(1, 4096))
      ->envname("H3_RANKS");
  app.add_option("--timeout", g.timeout, "seconds a rank waits for a peer before failing the job")
      ->check(h3::cli::finite_range(0.001, 1e7))
      ->envname("H3_TIMEOUT");
  app.add_option("--device", g.device, "cpu, or cuda (the DiT on the GPU; ranks share GPUs round-robin)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->envname("H3_DEVICE");
  app.add_flag("--deterministic", g.deterministic,
               "GPU: fixed GEMM and attention choices so ulysses/ulysses-ag give bitwise equal outputs at every world "
               "size")
      ->envname("H3_DETERMINISTIC");
  app.add_option("--transport", g.transport,
                 "how GPU ranks exchange device tensors: nccl (one GPU per rank), mpi (through host memory; ranks may "
                 "share a GPU) or auto (nccl when every rank has its own GPU)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}))
      ->envname("H3_TRANSPORT");
  // The knobs with a flag (core/knobs.h: the table says what each does, its variable and its default).
  // A knob that only some commands take is a row of tools/options.cpp instead (add_command_knobs).
  for (const h3::KnobInfo& k : h3::knob_table()) {
    if (!*k.flag || command_knob(k.name)) continue;
    CLI::Option* opt = app.add_option(k.flag, g.knob_values[k.name], h3::cli::knob_help(k));
    opt->group("Run-time options");
    g.knob_options.emplace_back(k.name, opt);
  }
  std::string env_only = "Environment only:";
  for (const h3::KnobInfo& k : h3::knob_table())
    if (!*k.flag) env_only += fmt::format("\n  {}: {} ({})", k.env, k.help, k.env_only);
  app.footer(env_only);
  app.add_flag("--report-placement", g.report_placement,
               "rank 0 writes 'h3-placement: RANK HOST' lines to stderr (added by h3 --ranks N for itself)")
      ->group("");
}

// Every command, by its subcommand.
std::map<CLI::App*, h3::cli::Runner> add_commands(CLI::App& app) {
  std::map<CLI::App*, h3::cli::Runner> runners;
  for (h3::cli::Runner (*add)(CLI::App&) :
       {h3::cli::add_verify, h3::cli::add_info, h3::cli::add_run, h3::cli::add_parity, h3::cli::add_comm_test,
        h3::cli::add_bench_comm, h3::cli::add_convert, h3::cli::add_vae_parity, h3::cli::add_bench,
        h3::cli::add_bench_decode, h3::cli::add_generate, h3::cli::add_serve, h3::cli::add_serve_worker,
        h3::cli::add_decode, h3::cli::add_probe_media, h3::cli::add_plan}) {
    const size_t before = app.get_subcommands({}).size();
    auto run = add(app);
    runners[app.get_subcommands({}).at(before)] = run;
  }
  return runners;
}

// The knobs only some commands take (--max-device-memory), attached to the commands their rows list; what is given
// reaches load_knobs() as a global knob flag's value does.
void add_command_knobs(CLI::App& app, GlobalFlags& g) {
  for (const h3::cli::OptionDef* d : h3::cli::option_table()) {
    if (d->knob.empty()) continue;
    for (const h3::cli::OptionUse& u : d->uses)
      g.knob_options.emplace_back(
          d->knob, h3::cli::add(app.get_subcommand(u.command), *d, g.knob_values[d->knob])->group("Run-time options"));
  }
}

// What the global options say, for the command; the GPU options as main starts the backend (but for the GPU's
// rank, a collective that main runs only when it starts one).
h3::cli::GlobalContext global_context(const GlobalFlags& g) {
  h3::cli::GlobalContext ctx;
  ctx.ranks = g.ranks;
  ctx.device = g.device;
  ctx.transport = h3::transport_from_name(g.transport);
  ctx.gpu.local_rank = h3::knobs().local_rank;
  ctx.gpu.numerics = h3::numerics_from_knobs(g.deterministic);
  ctx.gpu.gemm_tune = h3::knobs().gemm_tune;
  // --gemm-algos: auto, a file per GPU model in the user's cache folder; none; or a path.
  if (const std::string& algos = h3::knobs().gemm_algos; algos == "auto")
    ctx.gpu.gemm_algos_dir = h3::knobs().cache_dir;
  else if (algos != "none")
    ctx.gpu.gemm_algos = algos;
  ctx.gpu.max_device_bytes = h3::knobs().max_device_bytes;
  return ctx;
}

// With more than one rank: what runs where, per host (docs/multi-host.md: reading the placement printout).
void report_placement(h3::Comm& world, bool to_stderr) {
  const std::string dev = h3::gpu_backend_started() ? "GPU " + h3::gpu_bus_id() : "cpu";
  const auto places = h3::gather_placement(world, dev);
  if (world.rank() == 0)
    for (const auto& line : h3::placement_lines(places)) spdlog::info("{}", line);
  if (world.rank() == 0 && to_stderr) {
    for (const auto& p : places) std::fprintf(stderr, "h3-placement: %d %s\n", p.rank, p.host.c_str());
    std::fflush(stderr);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"h3-engine: MiniMax-H3 video+audio generation on CPUs and GPUs (version " H3_VERSION ")"};
  app.require_subcommand(1);
  app.set_version_flag("--version", h3::cli::version_text, "print the version, git revision and what was compiled in");
  GlobalFlags g;
  add_global_options(app, g);
  app.fallthrough();
  const std::map<CLI::App*, h3::cli::Runner> runners = add_commands(app);
  add_command_knobs(app, g);
  // The global options each command's --help lists (a command not named here uses all of them).
  h3::cli::add_global_option_footers(app, {{"info", {"--log-level", "--ranks"}},
                                           {"convert", {"--log-level"}},
                                           {"serve-worker", {}},
                                           {"probe-media", {}},
                                           {"plan", {"--log-level", "--ranks"}}});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return h3::cli::exit_on_parse_error(app, e, argc, argv);
  }
  try {
    std::map<std::string, std::string> given;
    for (const auto& [name, opt] : g.knob_options)
      if (opt->count() > 0) given[name] = g.knob_values[name];
    h3::load_knobs(given);
    // `info --ranks N` only reports what N ranks would hold; it never starts them.
    // `serve --ranks N` starts its rank group itself (src/serve/supervisor.h); the supervisor stays one process.
    const bool report_only = app.got_subcommand("info") || app.got_subcommand("plan") || app.got_subcommand("serve");
    if (!report_only) h3::relaunch_under_mpi_if_needed(g.ranks, argc, argv, h3::knobs().mpirun);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return h3::cli::kUsageError;
  }
  h3::Comm& world = h3::world();
  world.timeout_s = g.timeout;
  h3::log_setup(world.rank(), world.size(), g.log_level);
  if (h3::knobs_summary() != "defaults") spdlog::info("run-time options: {}", h3::knobs_summary());
  h3::cli::GlobalContext ctx = global_context(g);
  if (h3::in_mpi_job() && g.ranks > 1 && world.size() != g.ranks)
    spdlog::warn("--ranks {} but the MPI job has {} ranks; using {}", g.ranks, world.size(), world.size());
  int status = 2;
  try {
    if (ctx.cuda() && !app.got_subcommand("info") && !app.got_subcommand("plan")) {
      ctx.gpu.rank = h3::local_rank(world);
      h3::start_gpu_backend(ctx.gpu);
    }
    if (world.size() > 1) report_placement(world, g.report_placement);
    for (const auto& [sub, run] : runners)
      if (sub->parsed()) status = run(ctx);
  } catch (const std::exception& e) {
    // A bad request fails on every rank alike (the inputs are the same); any other rank-local failure must not
    // leave the others waiting, so under MPI the whole job ends here.
    const std::string who = world.size() > 1 ? fmt::format("rank {} ({}): ", world.rank(), world.host()) : "";
    if (world.size() > 1) h3::abort_job(who + e.what(), 2);
    std::fprintf(stderr, "error: %s\n", e.what());
    status = 2;
  }
  h3::finalize_world();
  return status;
}

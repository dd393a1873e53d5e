// h3: the command-line front end. Every flag also reads an environment variable H3_<FLAG>; the run-time options of
// core/knobs.h are parsed here, once, from their flags and the environment. Usage errors exit 2 with a "did you
// mean" for misspelt commands and options; `h3 --version` says what was compiled in (cli_habits.h).
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

int main(int argc, char** argv) {
  CLI::App app{"h3-engine: MiniMax-H3 video+audio generation on CPUs and GPUs (version " H3_VERSION ")"};
  app.require_subcommand(1);
  app.set_version_flag("--version", h3::cli::version_text, "print the version, git revision and what was compiled in");
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error", "critical", "off"}))
      ->envname("H3_LOG_LEVEL");
  int ranks = 1;
  double timeout = 120;
  app.add_option("--ranks", ranks, "run on N ranks (relaunches under mpirun unless already in an MPI job)")
      ->check(CLI::Range(1, 4096))
      ->envname("H3_RANKS");
  app.add_option("--timeout", timeout, "seconds a rank waits for a peer before failing the job")
      ->check(h3::cli::finite_range(0.001, 1e7))
      ->envname("H3_TIMEOUT");
  std::string device = "cpu";
  bool deterministic = false;
  app.add_option("--device", device, "cpu, or cuda (the DiT on the GPU; ranks share GPUs round-robin)")
      ->check(CLI::IsMember({"cpu", "cuda"}))
      ->envname("H3_DEVICE");
  app.add_flag("--deterministic", deterministic,
               "GPU: fixed GEMM and attention choices so ulysses/ulysses-ag give bitwise equal outputs at every world "
               "size")
      ->envname("H3_DETERMINISTIC");
  std::string transport = "auto";
  app.add_option("--transport", transport,
                 "how GPU ranks exchange device tensors: nccl (one GPU per rank), mpi (through host memory; ranks may "
                 "share a GPU) or auto (nccl when every rank has its own GPU)")
      ->check(CLI::IsMember({"auto", "mpi", "nccl"}))
      ->envname("H3_TRANSPORT");
  // The knobs with a flag (core/knobs.h: the table says what each does, its variable and its default).
  std::map<std::string, std::string> knob_flags;
  std::vector<std::pair<std::string, CLI::Option*>> knob_options;
  for (const h3::KnobInfo& k : h3::knob_table()) {
    if (!*k.flag) continue;
    CLI::Option* opt =
        app.add_option(k.flag, knob_flags[k.name],
                       fmt::format("{} (environment: {}; default {})", k.help, k.env, *k.def ? k.def : "unset"));
    opt->group("Run-time options");
    knob_options.emplace_back(k.name, opt);
  }
  std::string env_only = "Environment only:";
  for (const h3::KnobInfo& k : h3::knob_table())
    if (!*k.flag) env_only += fmt::format("\n  {}: {} ({})", k.env, k.help, k.env_only);
  app.footer(env_only);
  bool report_placement = false;
  app.add_flag("--report-placement", report_placement,
               "rank 0 writes 'h3-placement: RANK HOST' lines to stderr (added by h3 --ranks N for itself)")
      ->group("");
  app.fallthrough();
  std::map<CLI::App*, h3::cli::Runner> runners;
  auto reg = [&](h3::cli::Runner (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    auto run = add(app);
    runners[app.get_subcommands({}).at(before)] = run;
  };
  reg(h3::cli::add_verify);
  reg(h3::cli::add_info);
  reg(h3::cli::add_run);
  reg(h3::cli::add_parity);
  reg(h3::cli::add_comm_test);
  reg(h3::cli::add_bench_comm);
  reg(h3::cli::add_convert);
  reg(h3::cli::add_vae_parity);
  reg(h3::cli::add_bench);
  reg(h3::cli::add_bench_decode);
  reg(h3::cli::add_generate);
  reg(h3::cli::add_serve);
  reg(h3::cli::add_serve_worker);
  reg(h3::cli::add_decode);
  reg(h3::cli::add_probe_media);
  // The global options each command's --help lists (a command not named here uses all of them).
  h3::cli::add_global_option_footers(
      app,
      {{"info", {"--log-level", "--ranks"}}, {"convert", {"--log-level"}}, {"serve-worker", {}}, {"probe-media", {}}});
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return h3::cli::exit_on_parse_error(app, e, argc, argv);
  }
  try {
    std::map<std::string, std::string> given;
    for (const auto& [name, opt] : knob_options)
      if (opt->count() > 0) given[name] = knob_flags[name];
    h3::load_knobs(given);
    // `info --ranks N` only reports what N ranks would hold; it never starts them.
    // `serve --ranks N` starts its rank group itself (src/serve/supervisor.h); the supervisor stays one process.
    const bool report_only = app.got_subcommand("info") || app.got_subcommand("serve");
    if (!report_only) h3::relaunch_under_mpi_if_needed(ranks, argc, argv, h3::knobs().mpirun);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return h3::cli::kUsageError;
  }
  h3::Comm& world = h3::world();
  world.timeout_s = timeout;
  h3::log_setup(world.rank(), world.size(), log_level);
  if (h3::knobs_summary() != "defaults") spdlog::info("run-time options: {}", h3::knobs_summary());
  const h3::Numerics numerics = h3::numerics_from_knobs(deterministic);
  h3::cli::g_ranks = ranks;
  h3::cli::g_device = device;
  h3::cli::g_deterministic = deterministic;
  h3::cli::g_numerics = numerics;
  h3::cli::g_transport = h3::transport_from_name(transport);
  if (h3::in_mpi_job() && ranks > 1 && world.size() != ranks)
    spdlog::warn("--ranks {} but the MPI job has {} ranks; using {}", ranks, world.size(), world.size());
  int status = 2;
  try {
    if (device == "cuda" && !app.got_subcommand("info")) {
      h3::GpuOptions gpu;
      gpu.rank = h3::local_rank(world);
      gpu.local_rank = h3::knobs().local_rank;
      gpu.numerics = numerics;
      gpu.gemm_tune = h3::knobs().gemm_tune;
      gpu.gemm_algos = h3::knobs().gemm_algos;
      h3::start_gpu_backend(gpu);
    }
    if (world.size() > 1) {
      // What runs where, per host (docs/multi-host.md: reading the placement printout).
      const std::string dev = h3::gpu_backend_started() ? "GPU " + h3::gpu_bus_id() : "cpu";
      const auto places = h3::gather_placement(world, dev);
      if (world.rank() == 0)
        for (const auto& line : h3::placement_lines(places)) spdlog::info("{}", line);
      if (world.rank() == 0 && report_placement) {
        for (const auto& p : places) std::fprintf(stderr, "h3-placement: %d %s\n", p.rank, p.host.c_str());
        std::fflush(stderr);
      }
    }
    for (auto& [sub, run] : runners)
      if (sub->parsed()) status = run();
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

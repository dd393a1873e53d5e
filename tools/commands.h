// The h3 CLI's subcommands; each registers its options on the app and returns a runner.
#pragma once
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "core/numerics.h"
#include "distributed/comm_device.h"

namespace h3::cli {

// The global --ranks value (for commands that report on a world size without starting it).
inline int g_ranks = 1;
// The global --device (cpu or cuda) and --deterministic values; the GPU backend is started before the command runs.
inline std::string g_device = "cpu";
inline bool g_deterministic = false;
// The numerics (core/numerics.h) the GPU backend was started with, for the models' options, and --transport.
inline Numerics g_numerics;
inline Transport g_transport = Transport::automatic;

// A number within [lo, hi]; unlike CLI::Range it refuses nan and inf (every comparison with nan is false).
inline CLI::Validator finite_range(double lo, double hi) {
  auto str = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%g", v);
    return std::string(b);
  };
  return CLI::Validator(
      [lo, hi, str](std::string& v) -> std::string {
        double d = 0;
        try {
          size_t used = 0;
          d = std::stod(v, &used);
          if (used != v.size()) return "not a number: " + v;
        } catch (const std::exception&) {
          return "not a number: " + v;
        }
        if (!std::isfinite(d) || d < lo || d > hi)
          return "must be a finite number in [" + str(lo) + ", " + str(hi) + "], got " + v;
        return "";
      },
      "FINITE in [" + str(lo) + ", " + str(hi) + "]");
}

// --mode (or H3_MODE), --tp and --chunks: how a command spreads the DiT over --ranks N (distributed/plan.h).
inline void add_dist_options(CLI::App* cmd, std::string& mode, int& tp, int& chunks) {
  cmd->add_option("--mode", mode, "with --ranks N: ulysses, ulysses-ag, tensor or hybrid")
      ->check(CLI::IsMember({"ulysses", "ulysses-ag", "tensor", "hybrid"}))
      ->envname("H3_MODE")
      ->capture_default_str();
  cmd->add_option("--tp", tp, "hybrid: tensor-parallel degree")->check(CLI::Range(1, 4096));
  cmd->add_option("--chunks", chunks, "pieces each exchange is issued in")->check(CLI::Range(1, 64));
}

using Runner = std::function<int()>;
Runner add_verify(CLI::App& app);
Runner add_info(CLI::App& app);
Runner add_run(CLI::App& app);
Runner add_parity(CLI::App& app);
Runner add_comm_test(CLI::App& app);
Runner add_bench_comm(CLI::App& app);
Runner add_convert(CLI::App& app);
Runner add_vae_parity(CLI::App& app);
Runner add_bench(CLI::App& app);
Runner add_bench_decode(CLI::App& app);
Runner add_generate(CLI::App& app);
Runner add_serve(CLI::App& app);
Runner add_serve_worker(CLI::App& app);
Runner add_decode(CLI::App& app);
Runner add_probe_media(CLI::App& app);
Runner add_plan(CLI::App& app);

}  // namespace h3::cli

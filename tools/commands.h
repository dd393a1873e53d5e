// The h3 CLI's subcommands; each registers its options on the app and returns a runner.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "core/numerics.h"
#include "dist/comm_device.h"

namespace h3::cli {

// The global --ranks value (for commands that report on a world size without starting it).
inline int g_ranks = 1;
// The global --device (cpu or cuda) and --deterministic values; the GPU backend is started before the command runs.
inline std::string g_device = "cpu";
inline bool g_deterministic = false;
// The numerics (core/numerics.h) the GPU backend was started with, for the models' options, and --transport.
inline Numerics g_numerics;
inline Transport g_transport = Transport::automatic;

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

}  // namespace h3::cli

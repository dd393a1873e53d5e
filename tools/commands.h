// The h3 CLI's subcommands; each registers its options on the app and returns a runner, which tools/main.cpp calls
// with what the global options say once they are parsed.
#pragma once
#include <CLI/CLI.hpp>
#include <functional>
#include <string>

#include "backend/backend.h"
#include "core/numerics.h"
#include "core/tensor.h"
#include "distributed/comm_device.h"
#include "options.h"

namespace h3::cli {

// The global options, built once in tools/main.cpp after parsing and handed to the command that runs.
struct GlobalContext {
  int ranks = 1;               // --ranks (info reports on a world of this size; serve starts its group with it)
  std::string device = "cpu";  // --device: cpu or cuda (main starts the GPU backend before the command runs)
  Transport transport = Transport::automatic;  // --transport
  // How main starts the GPU backend with --device cuda (h3 convert starts its own with these): the numerics the
  // models take too (--deterministic, the FP8 knobs) and --max-device-memory.
  GpuOptions gpu;

  bool cuda() const { return device == "cuda"; }
  Device compute_device() const { return cuda() ? Device::cuda : Device::cpu; }
  const char* processor() const { return cuda() ? "GPU" : "CPU"; }  // for reports: "on the GPU"
  const Numerics& numerics() const { return gpu.numerics; }
  bool deterministic() const { return gpu.numerics.deterministic; }
};

using Runner = std::function<int(const GlobalContext&)>;
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

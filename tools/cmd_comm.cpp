// h3 comm-test: the collective tests (nccl-tests style, #wrong must be 0); h3 bench-comm: each exchange of each mode
// at real H3 shapes, time and bus bandwidth, as a table and JSON. Neither needs weights.
#include <chrono>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "commands.h"
#include "core/error.h"
#include "core/tensor.h"
#include "distributed/comm_check.h"
#include "distributed/comm_device.h"
#include "distributed/partition.h"
#include "distributed/plan.h"

namespace h3::cli {

namespace {
// With --device cuda and one GPU per rank: an NCCL communicator over the world (device buffers); else none.
std::unique_ptr<Comm> device_comm(Comm& w, Transport transport) {
  if (!gpu_backend_started() || pick_device_transport(w, gpu_bus_id(), transport) != Transport::nccl) return nullptr;
  return make_nccl_comm(w);
}
}  // namespace

Runner add_comm_test(CLI::App& app) {
  auto* cmd = app.add_subcommand("comm-test", "collective tests on known values (in and out of place, ragged)");
  auto base = std::make_shared<int64_t>(1000);
  cmd->add_option("--elements", *base, "base element count per rank")->check(CLI::Range(1, 1 << 28));
  return [base](const GlobalContext& ctx) -> int {
    std::unique_ptr<Comm> nccl = device_comm(world(), ctx.transport);
    Comm& w = nccl ? *nccl : world();
    comm_probe(w, nccl ? "NCCL" : "MPI");
    auto rows = run_comm_checks(w, *base);
    int64_t wrong = 0;
    if (w.rank() == 0) {
      std::printf("comm-test on %d ranks (%s)\n", w.size(), nccl ? "NCCL, device memory" : "MPI, host memory");
      std::printf("%-16s %-12s %10s %10s %8s\n", "collective", "placement", "elements", "time_us", "#wrong");
    }
    for (const auto& r : rows) {
      wrong += r.wrong;
      if (w.rank() == 0)
        std::printf("%-16s %-12s %10lld %10.1f %8lld\n", r.collective.c_str(), r.in_place ? "in place" : "out of place",
                    static_cast<long long>(r.elements), r.seconds * 1e6, static_cast<long long>(r.wrong));
    }
    if (w.rank() == 0)
      std::printf("%s: %zu checks, %lld wrong\n", wrong == 0 ? "PASS" : "FAIL", rows.size(),
                  static_cast<long long>(wrong));
    return wrong == 0 ? 0 : 1;
  };
}

Runner add_bench_comm(CLI::App& app) {
  auto* cmd = app.add_subcommand("bench-comm", "time each mode's exchanges at real H3 shapes (no weights)");
  struct Opts {
    std::vector<int64_t> lengths = {14908, 37830};  // 480p and 768p packed lengths (performance.md)
    int heads = 56, head_dim = 128, hidden = 5376, iters = 3;
    std::string dtype = "bf16", json;
  };
  auto o = std::make_shared<Opts>();
  add(cmd, opt::seq, o->lengths);
  cmd->add_option("--iters", o->iters, "timed repetitions (median)")->capture_default_str();
  add(cmd, opt::json, o->json);
  return [o](const GlobalContext& ctx) -> int {
    std::unique_ptr<Comm> nccl = device_comm(world(), ctx.transport);
    Comm& w = nccl ? *nccl : world();
    const char* transport = nccl ? "NCCL device" : "MPI host";
    const Device dev = nccl ? Device::cuda : Device::cpu;
    // Payload buffers where the transport moves them from (device memory for NCCL).
    auto buffer = [dev](DType dt, int64_t n) {
      return std::make_shared<Tensor>(dt, Shape{std::max<int64_t>(n, 1)}, dev);
    };
    const int n = w.size(), me = w.rank();
    const int64_t D = o->head_dim, inner = o->heads * D, H = o->hidden;
    const size_t es = 2;  // bf16 on the wire
    nlohmann::json out = nlohmann::json::array();
    if (me == 0) {
      std::printf("bench-comm on %d ranks (%s memory), bf16 payloads, median of %d\n", n, transport, o->iters);
      std::printf("%-8s %-12s %-34s %12s %10s %10s\n", "S", "mode", "exchange", "bytes/rank", "time_ms", "busbw_GB/s");
    }
    for (int64_t S : o->lengths) {
      auto rows = partition(S, n, "packed rows");
      auto heads = partition(o->heads, n, "heads");
      struct Ex {
        const char* mode;
        const char* name;
        int per_block;
        std::function<double()> run;
        int64_t bytes;
      };
      std::vector<Ex> exs;
      // Ulysses: seq -> head all-to-all of one of q/k/v (3 per block) and the inverse (1 per block).
      {
        std::vector<int64_t> sc(n), rc(n);
        int64_t sb = 0;
        for (int j = 0; j < n; ++j) {
          sc[j] = rows[me].size() * heads[j].size() * D;
          rc[j] = rows[j].size() * heads[me].size() * D;
          sb += sc[j];
        }
        auto send = buffer(DType::bf16, sb);
        auto recv = buffer(DType::bf16, S * heads[me].size() * D);
        exs.push_back({"ulysses", "all-to-all q|k|v|out (x4 per block)", 4,
                       [&w, send, recv, sc, rc] {
                         w.alltoallv(send->raw(), sc, recv->raw(), rc, DType::bf16, "bench all-to-all");
                         return 0.0;
                       },
                       static_cast<int64_t>(sb * es)});
      }
      // ulysses-ag: all-gather of the modulated hidden state (1 per block) + the inverse all-to-all (1 per block).
      {
        std::vector<int64_t> counts(n);
        for (int j = 0; j < n; ++j) counts[j] = rows[j].size() * H;
        auto send = buffer(DType::bf16, counts[me]);
        auto recv = buffer(DType::bf16, S * H);
        exs.push_back({"ulysses-ag", "all-gather hidden (x1 per block)", 1,
                       [&w, send, recv, counts] {
                         w.allgatherv(send->raw(), recv->raw(), counts, DType::bf16, "bench all-gather");
                         return 0.0;
                       },
                       static_cast<int64_t>((S - rows[me].size()) * H * es)});
        // tensor: all-gather + reduce-scatter of [S, H] twice per block (attention and MLP).
        // bf16 partials, as the GPU's tensor mode reduces them (the CPU's f32 partials move twice the bytes).
        auto part = buffer(DType::bf16, S * H);
        auto mine = buffer(DType::bf16, counts[me]);
        exs.push_back({"tensor", "reduce-scatter partial (x2 per block)", 2,
                       [&w, part, mine, counts] {
                         w.reduce_scatterv(part->raw(), counts, mine->raw(), DType::bf16, "bench reduce-scatter");
                         return 0.0;
                       },
                       static_cast<int64_t>((S - rows[me].size()) * H * es)});
      }
      (void)inner;
      for (auto& e : exs) {
        std::vector<double> times;
        for (int it = 0; it < o->iters + 1; ++it) {
          w.barrier("bench barrier");
          auto t0 = std::chrono::steady_clock::now();
          e.run();
          gpu_synchronize();
          double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          if (it > 0) times.push_back(t);  // the first is warm-up
        }
        std::sort(times.begin(), times.end());
        const double med = times.empty() ? 0 : times[times.size() / 2];
        // Bus bandwidth: bytes each rank sends (or receives) to others over the time, as nccl-tests counts it.
        const double busbw = med > 0 ? e.bytes / med / 1e9 : 0;
        if (me == 0) {
          std::printf("%-8lld %-12s %-34s %12lld %10.3f %10.2f\n", static_cast<long long>(S), e.mode, e.name,
                      static_cast<long long>(e.bytes), med * 1e3, busbw);
          out.push_back({{"S", S},
                         {"ranks", n},
                         {"mode", e.mode},
                         {"exchange", e.name},
                         {"per_block", e.per_block},
                         {"bytes_per_rank", e.bytes},
                         {"time_ms", med * 1e3},
                         {"busbw_GBps", busbw},
                         {"transport", transport}});
        }
      }
    }
    if (me == 0 && !o->json.empty()) {
      std::FILE* f = std::fopen(o->json.c_str(), "w");
      if (!f) fail("{}: cannot write", o->json);
      std::fputs(out.dump(2).c_str(), f);
      std::fclose(f);
    }
    return 0;
  };
}

}  // namespace h3::cli

// h3 bench: the full DiT on the GPU at real packed lengths — per-forward time and energy (the board's counter:
// backend/energy.h), GEMM and attention TFLOPS, peak device memory — and a per-region breakdown from the same ops run
// in isolation at the same shapes (labelled as such: the regions are timed one by one, not inside the forward).
// Prints a table and writes JSON with --json.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "backend/energy.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/profile.h"
#include "distributed/comm.h"
#include "distributed/plan.h"
#include "io/procedural.h"
#include "model/dit/fp8_qk.h"
#include "ops/ops.h"
#include "pipeline/memory_plan.h"
#include "pipeline/noise.h"
#include "pipeline/synthetic.h"
#include "profile_json.h"

namespace h3::cli {

namespace {

using clock_type = std::chrono::steady_clock;

// `reps` runs of f after one warm-up, with the GPU drained around each run: their median seconds and, from
// `energy`'s counter read after the warm-up's synchronize and after the last run's, their energy.
struct Timing {
  double median = 0;
  EnergySpan energy;
};
template <typename F>
Timing time_runs(int reps, F f, const EnergyCounter& energy = {}) {
  f();
  gpu_synchronize();
  const std::optional<uint64_t> start_mj = energy.read();
  const auto start = clock_type::now();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    auto a = clock_type::now();
    f();
    gpu_synchronize();
    t.push_back(std::chrono::duration<double>(clock_type::now() - a).count());
  }
  const double total = std::chrono::duration<double>(clock_type::now() - start).count();
  const std::optional<uint64_t> end_mj = energy.read();
  std::sort(t.begin(), t.end());
  return {t[t.size() / 2], energy_span(start_mj, end_mj, reps, total)};
}
template <typename F>
double time_median(int reps, F f) {
  return time_runs(reps, f).median;
}

struct Resolution {
  std::string name;
  SyntheticRequest req;
};

// Seeded normal values on the GPU; large tensors repeat a 4M-value block (generating billions on the host is slow,
// and zeros would flatter the GEMMs).
Tensor random_gpu(Shape s, uint64_t seed, DType dt) {
  const int64_t n = shape_numel(s), block = std::min<int64_t>(n, int64_t(1) << 22);
  Tensor src = seeded_normal({block}, seed, 1).to_device(Device::cuda).to(dt);
  Tensor out = Tensor::empty(dt, s, Device::cuda);
  const size_t es = dtype_size(dt);
  for (int64_t off = 0; off < n; off += block) {
    const int64_t len = std::min(block, n - off);
    device_hooks().copy(static_cast<std::byte*>(out.raw()) + off * es, true, src.raw(), true, len * es);
  }
  return out;
}

// One block's GEMM weights, random, in bf16 or quantized to FP8 (per tensor) for p == fp8.
struct BlockWeights {
  Tensor qkv, out, fc1, fc2;
};
BlockWeights block_weights(const DitConfig& c, Precision p) {
  const int64_t H = c.hidden_size, I = c.inner_dim(), F = c.ffn_dim;
  auto weight = [&](int64_t out, int64_t in, uint64_t seed) {
    Tensor w = random_gpu({out, in}, seed, DType::bf16);
    return p == Precision::fp8 ? ops::quantize_fp8(w) : w;
  };
  return {weight(I, H, 2), weight(H, I, 3), weight(2 * F, H, 4), weight(H, F, 5)};
}

// The regions of one block at packed length S, timed in isolation; seconds per block.
nlohmann::json regions(const DitConfig& c, int64_t S, Precision p, int reps) {
  const int64_t H = c.hidden_size, I = c.inner_dim(), F = c.ffn_dim, D = c.attention_head_dim;
  const DType bf = DType::bf16;
  const BlockWeights wts = block_weights(c, p);
  Tensor x = random_gpu({S, H}, 1, bf);
  Tensor q = random_gpu({S, I}, 6, bf), k = random_gpu({S, I}, 7, bf), v = random_gpu({S, I}, 8, bf);
  Tensor g = random_gpu({S, F}, 9, bf), u = random_gpu({S, 2 * F}, 10, bf);
  Tensor table = random_gpu({3, H}, 11, bf), nw = random_gpu({H}, 12, bf), qn = random_gpu({D}, 13, bf);
  Tensor cs = random_gpu({S, c.rotary_dim()}, 14, bf), sn = random_gpu({S, c.rotary_dim()}, 15, bf);
  std::vector<int32_t> idx_host(static_cast<size_t>(S));
  for (int64_t i = 0; i < S; ++i) idx_host[i] = static_cast<int32_t>(i % 3);
  Tensor idx = Tensor::from(idx_host, {S}).to_device(Device::cuda);
  nlohmann::json r;
  auto gemm = [&](const char* name, const Tensor& in_bf16, const Tensor& w, int count) {
    // FP8: the activations quantized per row beforehand, as the forward's fused producers hand them over.
    const Tensor in = p == Precision::fp8 ? ops::quantize_fp8(in_bf16) : in_bf16;
    const double s = count * time_median(reps, [&] { ops::linear(in, w); });
    r[name] = {{"seconds", s}, {"tflops", count * 2.0 * S * w.dim(0) * w.dim(1) / s / 1e12}};
  };
  gemm("qkv", x, wts.qkv, 3);
  // FP8: the forward's FP8 attention (q, k normed and rotated into e4m3 with the block's fixed scale and its head
  // norm bound, model/dit/fp8_qk.h; bf16 v quantized per tensor inside, as the forward hands it over; O left in e4m3
  // for the FP8 out projection).
  const QkFp8Scale qk8 = qk_fp8_scale(qn, D);
  auto attend = [&](const Tensor& aq, const Tensor& ak, const Tensor& av) {
    if (p != Precision::fp8) return std::function<void()>([&] { ops::attention(aq, ak, av, D); });
    // RoPE by angle 0 (cos 1, sin 0): random tables would not be rotations, and the bound assumes norms are kept.
    const Tensor s8 = Tensor::from(std::vector<float>{qk8.scale}, {1}).to_device(Device::cuda);
    const Tensor one = Tensor::from(std::vector<float>(static_cast<size_t>(S * c.rotary_dim()), 1.0f),
                                    {S, c.rotary_dim()})
                           .to_device(Device::cuda)
                           .to(bf),
                 zero = Tensor(bf, {S, c.rotary_dim()}, Device::cuda);
    auto to8 = [&](const Tensor& t) {
      return ops::qk_norm_rope_fp8(t, qn, D, 1e-6, one, zero, true, s8).with_head_norm_bound(qk8.norm_bound);
    };
    return std::function<void()>([q8 = to8(aq), k8 = to8(ak), av, D] { ops::attention_fp8_out(q8, k8, av, D); });
  };
  {
    const double s = time_median(reps, attend(q, k, v));
    r["attention"] = {{"seconds", s}, {"tflops", 4.0 * S * S * I / s / 1e12}};
  }
  // Not part of the per-block sum: one rank's share of 8-way Ulysses (7 heads), and the AdaLN table GEMM.
  nlohmann::json extra;
  {
    const int64_t h7 = 7 * D;
    Tensor q7 = ops::columns(q, 0, h7), k7 = ops::columns(k, 0, h7), v7 = ops::columns(v, 0, h7);
    const double s = time_median(reps, attend(q7, k7, v7));
    extra["attention_7_heads"] = {{"seconds", s}, {"tflops", 4.0 * S * S * h7 / s / 1e12}};
    Tensor ada_in = random_gpu({2, c.time_embed_dim}, 16, bf), ada_w = random_gpu({18 * H, c.time_embed_dim}, 17, bf);
    const double a = time_median(reps, [&] { ops::linear(ada_in, ada_w); });
    extra["adaln_table"] = {{"seconds", a}, {"gbytes_per_s", ada_w.nbytes() / a / 1e9}};
  }
  gemm("out", q, wts.out, 1);
  gemm("fc1", x, wts.fc1, 1);
  gemm("fc2", g, wts.fc2, 1);
  {
    // Per block: two fused gated residual + norm + modulation passes (FP8: their output quantized per row), q and
    // k norm+RoPE, one SwiGLU (FP8: into per-row FP8); the forward's separate kernels for reference.
    auto bytes_rate = [&](const char* name, double bytes, auto f) {
      const double s = time_median(reps, f);
      extra[name] = {{"seconds", s}, {"gbytes_per_s", bytes / s / 1e9}};
      return s;
    };
    const bool f8 = p == Precision::fp8;
    const double xb = static_cast<double>(x.nbytes()), qb = static_cast<double>(q.nbytes());
    double s = 2 * bytes_rate("residual_norm_modulate", (f8 ? 3.5 : 4.0) * xb, [&] {  // FP8: the bounded scale
                 ops::residual_norm_modulate(x, table, idx, x, nw, 1e-6, table, table, true,
                                             f8 ? ops::Fp8Out::bound : ops::Fp8Out::none);
               });
    s += 2 * bytes_rate("qk_norm_rope", 2 * qb, [&] { ops::qk_norm_rope(q, qn, D, 1e-6, cs, sn, true); });
    s += bytes_rate("swiglu", 1.5 * static_cast<double>(u.nbytes()), [&] { ops::swiglu(u, true); });
    bytes_rate("norm_modulate", 2 * xb, [&] { ops::norm_modulate(x, nw, 1e-6, table, table, idx, true); });
    bytes_rate("gate_residual", 3 * xb, [&] { ops::gate_residual(x, table, idx, x, true); });
    if (f8) bytes_rate("quantize_fp8_rows", 1.5 * qb, [&] { ops::quantize_fp8_rows(q); });
    r["norms_modulation"] = {{"seconds", s}};
  }
  r["_not_summed"] = extra;
  return r;
}

// One Ulysses rank's compute per block at world size N: its rows (GEMMs, norms) and, after the all-to-all, its heads
// over every row (attention). Seconds, measured on this GPU.
double ulysses_rank_block(const DitConfig& c, int64_t S, int N, Precision p, int reps) {
  const int64_t H = c.hidden_size, I = c.inner_dim(), F = c.ffn_dim, D = c.attention_head_dim;
  const int64_t rows = (S + N - 1) / N, heads = (c.num_attention_heads + N - 1) / N;
  const DType bf = DType::bf16;
  const BlockWeights wts = block_weights(c, p);
  Tensor x = random_gpu({rows, H}, 1, bf);
  Tensor qr = random_gpu({rows, I}, 6, bf), g = random_gpu({rows, F}, 9, bf);
  Tensor q = random_gpu({S, heads * D}, 7, bf), k = random_gpu({S, heads * D}, 8, bf),
         v = random_gpu({S, heads * D}, 11, bf);
  Tensor table = random_gpu({3, H}, 12, bf), nw = random_gpu({H}, 13, bf), qn = random_gpu({D}, 14, bf);
  Tensor cs = random_gpu({rows, c.rotary_dim()}, 15, bf), sn = random_gpu({rows, c.rotary_dim()}, 16, bf);
  std::vector<int32_t> idx_host(static_cast<size_t>(rows));
  for (int64_t i = 0; i < rows; ++i) idx_host[i] = static_cast<int32_t>(i % 3);
  Tensor idx = Tensor::from(idx_host, {rows}).to_device(Device::cuda);
  return time_median(reps, [&] {
    Tensor xq = p == Precision::fp8 ? ops::quantize_fp8(x) : x;
    for (int n = 0; n < 3; ++n) ops::qk_norm_rope(ops::linear(xq, wts.qkv), qn, D, 1e-6, cs, sn, true);
    ops::attention(q, k, v, D);
    ops::gate_residual(x, table, idx, ops::linear(qr, wts.out), true);
    ops::norm_modulate(x, nw, 1e-6, table, table, idx, true);
    ops::swiglu(ops::linear(x, wts.fc1), true);
    ops::gate_residual(x, table, idx, ops::linear(g, wts.fc2), true);
    ops::norm_modulate(x, nw, 1e-6, table, table, idx, true);
  });
}

struct BenchOpts {
  std::vector<std::string> res{"480p", "768p"}, precisions{"bf16", "fp8"};
  std::string model = "procedural:full", json;
  int reps = 3;
  int blocks = 0;
  std::vector<int> partitions;
  double link_gbps = 370;
  bool profile = false, no_isolated = false;
};

// The rows of --res (pipeline/synthetic.h's SyntheticRequest: frames, height, width, text rows, ...).
const std::map<std::string, Resolution>& known_resolutions() {
  static const std::map<std::string, Resolution> known = {{"480p", {"480p", {124, 480, 832, 64, 0.25f, 0.5f, 0}}},
                                                          {"768p", {"768p", {124, 768, 1344, 120, 0.25f, 0.5f, 0}}}};
  return known;
}

// --profile: the regions of one real forward, printed against the median forward time `s`.
void print_profile(const nlohmann::json& prof, double s) {
  std::printf("      real forward (one, profiled):");
  double sum = 0, idle = 0;
  for (auto& [name, v] : prof.items()) {
    const double t = v["seconds"].get<double>();
    idle += v["idle_before_seconds"].get<double>();
    if (v["host_only"].get<bool>()) {
      std::printf(" %s %.3f s host", name.c_str(), t);
      continue;
    }
    sum += t;
    std::printf(" %s %.3f s (%.0f%%)", name.c_str(), t, 100 * t / s);
  }
  std::printf(" | other %.3f s (device idle before regions %.3f s)\n", s - sum, idle);
}

// The isolated regions of one block (regions()), times the blocks, against the median forward time `s`.
void print_regions(const nlohmann::json& reg, int blocks, double s) {
  std::printf("      regions (isolated, x%d blocks):", blocks);
  double sum = 0;
  for (auto& [name, v] : reg.items()) {
    if (name.starts_with("_")) continue;
    const double t = v["seconds"].get<double>() * blocks;
    sum += t;
    std::printf(" %s %.3f s", name.c_str(), t);
  }
  std::printf(" | sum %.3f s, rest of the forward %.3f s\n", sum, s - sum);
  std::printf("      kernels:");
  for (auto& [name, v] : reg["_not_summed"].items()) {
    std::printf(" %s %.2f ms", name.c_str(), v["seconds"].get<double>() * 1e3);
    if (v.contains("tflops")) std::printf(" (%.0f TF)", v["tflops"].get<double>());
    if (v.contains("gbytes_per_s")) std::printf(" (%.0f GB/s)", v["gbytes_per_s"].get<double>());
  }
  std::printf("\n");
}

// An energy figure for the JSON: null when absent.
nlohmann::json or_null(std::optional<double> v) {
  return v ? nlohmann::json(*v) : nlohmann::json();
}

// One resolution on one loaded model: the table row (and the profile and region lines), and its JSON.
nlohmann::json bench_resolution(const BenchOpts& o, DitModel& model, const DitConfig& c, const std::string& rname,
                                const std::string& pname, double load_s, const EnergyCounter& energy) {
  const Precision p = precision_from_name(pname);
  DitInputs in = make_synthetic_inputs(c, known_resolutions().at(rname).req);
  const int64_t S = in.seq_len();
  // Each resolution starts from an empty cache, as a generate phase does: under a budget the blocks cached for the
  // last resolution would otherwise be given back inside this one's forwards.
  gpu_release_cached();
  gpu_reset_peak();
  auto forward = [&] { model.forward(in); };
  const Timing timed = time_runs(o.reps, forward, energy);
  const double s = timed.median;
  const EnergySpan& e = timed.energy;
  const double peak = gpu_peak_bytes() / 1073741824.0;
  const GpuAllocatorCounts alloc = gpu_allocator_counts();  // the warm-up forward and the timed ones
  if (alloc.cap_frees > 0)
    spdlog::warn(
        "{} {}: {} free segments ({:.2f} GiB) given back at the budget's cap in {} forwards (each waits for "
        "the whole device); {} blocks split",
        rname, pname, alloc.cap_frees, alloc.cap_free_bytes / 1073741824.0, o.reps + 1, alloc.splits);
  const double gemm_flops = 2.0 * S * c.num_layers *
                            (3.0 * c.inner_dim() * c.hidden_size + c.hidden_size * c.inner_dim() +
                             2.0 * c.ffn_dim * c.hidden_size + c.hidden_size * c.ffn_dim);
  const double attn_flops = 4.0 * S * S * c.inner_dim() * c.num_layers;
  nlohmann::json prof = nlohmann::json::object();
  if (o.profile) {
    profile::set_enabled(true);
    profile::take();
    model.forward(in);
    gpu_synchronize();
    const std::vector<profile::Total> totals = profile::take();
    profile::set_enabled(false);
    for (const auto& t : totals) prof[t.name] = profile_json(t);
  }
  nlohmann::json reg = o.no_isolated ? nlohmann::json::object() : regions(c, S, p, o.reps);
  double gemm_s = 0, attn_s = 0;
  if (!o.no_isolated) {
    attn_s = reg["attention"]["seconds"].get<double>() * c.num_layers;
    for (const char* g : {"qkv", "out", "fc1", "fc2"}) gemm_s += reg[g]["seconds"].get<double>() * c.num_layers;
  }
  auto cell = [](std::optional<double> v) { return v ? fmt::format("{:.1f}", *v) : std::string("-"); };
  std::printf("%-5s %-5s %7lld %10.3f %9.0f %9.0f %9.0f %10.1f %9s %7s\n", rname.c_str(), pname.c_str(),
              static_cast<long long>(S), s, (gemm_flops + attn_flops) / s / 1e12,
              gemm_s > 0 ? gemm_flops / gemm_s / 1e12 : 0.0, attn_s > 0 ? attn_flops / attn_s / 1e12 : 0.0, peak,
              cell(e.joules_per_forward).c_str(), cell(e.mean_watts).c_str());
  if (o.profile) print_profile(prof, s);
  if (!o.no_isolated) print_regions(reg, c.num_layers, s);
  return {{"gpu", gpu_description()},
          {"resolution", rname},
          {"precision", pname},
          {"S", S},
          {"blocks", c.num_layers},
          {"seconds_per_forward", s},
          {"joules_per_forward", or_null(e.joules_per_forward)},
          {"mean_watts", or_null(e.mean_watts)},
          {"energy",
           {{"joules", or_null(e.joules)},
            {"forwards", o.reps},
            {"counter", energy.absent.empty() ? energy.source : "absent: " + energy.absent},
            {"power_limit_watts", or_null(energy.power_limit_watts)}}},
          {"tflops", (gemm_flops + attn_flops) / s / 1e12},
          {"gemm_tflops_isolated", gemm_s > 0 ? gemm_flops / gemm_s / 1e12 : 0.0},
          {"attention_tflops_isolated", attn_s > 0 ? attn_flops / attn_s / 1e12 : 0.0},
          {"peak_gib", peak},
          {"allocator",
           {{"forwards", o.reps + 1},
            {"mallocs", alloc.mallocs},
            {"cap_frees", alloc.cap_frees},
            {"cap_free_bytes", alloc.cap_free_bytes},
            {"splits", alloc.splits}}},
          {"load_seconds", load_s},
          {"load_file_gb", model.load_report().file_bytes / 1e9},
          {"load_gb_per_s", model.load_report().gb_per_s()},
          {"regions_per_block", reg},
          {"exchange_seconds", 0.0},
          {"profile_real_forward", prof}};
}

// --partitions: per-rank compute of each N-way Ulysses partition measured here; the four all-to-alls per block
// (q, k, v in, attention out back: each rank sends rows/N x 7168 bf16 values (N-1)/N of them away) modelled at
// --link-gbps, not overlapped (an upper bound on the step time).
void bench_partitions(const BenchOpts& o, const DitConfig& c, nlohmann::json& all) {
  std::printf("\nUlysses per-rank partition (compute measured on this GPU, exchange MODELLED at %.0f GB/s)\n",
              o.link_gbps);
  std::printf("%-5s %-5s %3s %12s %12s %10s %9s %11s\n", "res", "dtype", "N", "compute s", "exchange s", "s/step",
              "speed-up", "efficiency");
  for (const auto& pname : o.precisions)
    for (const auto& rname : o.res) {
      const Precision p = precision_from_name(pname);
      const int64_t S = make_synthetic_inputs(c, known_resolutions().at(rname).req).seq_len();
      double t1 = 0;
      for (int N : o.partitions) {
        const double compute = c.num_layers * ulysses_rank_block(c, S, N, p, o.reps);
        const int64_t rows = (S + N - 1) / N;
        const double bytes = 4.0 * rows * c.inner_dim() * 2.0 * (N - 1) / N * c.num_layers;
        const double exchange = N > 1 ? bytes / (o.link_gbps * 1e9) : 0.0;
        const double step = compute + exchange;
        if (N == 1) t1 = step;
        const double speedup = t1 > 0 ? t1 / step : 0;
        std::printf("%-5s %-5s %3d %12.3f %12.3f %10.3f %9.2f %11.2f\n", rname.c_str(), pname.c_str(), N, compute,
                    exchange, step, speedup, t1 > 0 ? speedup / N : 0);
        all.push_back({{"kind", "ulysses_partition_modelled"},
                       {"resolution", rname},
                       {"precision", pname},
                       {"world", N},
                       {"compute_seconds_measured", compute},
                       {"exchange_seconds_modelled", exchange},
                       {"seconds_per_step", step},
                       {"speedup_vs_1", speedup},
                       {"link_gbps", o.link_gbps}});
      }
    }
}

// The DiT's residency under this process's device budget (--max-device-memory, else what was free at start less the
// margin: backend/budget.h), planned as h3 generate plans its denoise phase (pipeline/memory_plan.h) at the longest
// packed length asked for: every block resident when that fits, else as many as the budget holds and the rest
// streamed from pinned host memory. Refused before anything loads when even every block streamed does not fit.
DitStreaming bench_streaming(const BenchOpts& o, const DitConfig& c, Precision p) {
  MemoryPlanInputs in;
  in.dit = c;
  in.dit_precision = p;
  in.text_on_gpu = false;
  in.vae_on_gpu = false;
  for (const auto& rname : o.res)
    in.seq_len = std::max(in.seq_len, make_synthetic_inputs(c, known_resolutions().at(rname).req).seq_len());
  in.dit_calls = o.reps + 1;
  in.budget_bytes = gpu_budget_bytes() + kRuntimeReserve;
  in.device_bytes = in.budget_bytes;
  const MemoryPlan plan = plan_memory(in);
  if (!plan.fits) fail("h3 bench {}: {}", precision_name(p), plan.problem);
  if (plan.dit.streamed() == 0) return {};
  for (const auto& line : plan.describe()) spdlog::info("plan: {}", line);
  return {.resident_blocks = plan.dit.resident, .ring_slots = plan.dit.ring_slots};
}

int run_bench(const BenchOpts& o, const GlobalContext& ctx) {
  if (!ctx.cuda()) fail("h3 bench measures the GPU: run it as `h3 --device cuda bench`");
  DitCheckpoint ck = DitCheckpoint::open(o.model);
  if (o.blocks > 0) {
    if (!o.model.starts_with("procedural:")) fail("--blocks needs a procedural model (procedural:full)");
    DitConfig cfg = ck.config();
    cfg.num_layers = o.blocks;
    ck = DitCheckpoint::procedural(cfg, kDefaultProceduralSeed,
                                   o.model + " (first " + std::to_string(o.blocks) + " blocks)");
  }
  const DitConfig& c = ck.config();
  nlohmann::json all = nlohmann::json::array();
  std::printf("h3 bench: %s, %d blocks, %s\n", o.model.c_str(), c.num_layers, gpu_description().c_str());
  // Energy over each resolution's timed forwards, from the board's counter (backend/energy.h); absent, said once here.
  const EnergyCounter energy = nvml_energy_counter(gpu_bus_id());
  if (!energy.absent.empty())
    spdlog::warn("energy per forward not measured: {}", energy.absent);
  else if (energy.power_limit_watts)
    std::printf("energy: %s (power limit %.0f W)\n", energy.source.c_str(), *energy.power_limit_watts);
  else
    std::printf("energy: %s\n", energy.source.c_str());
  std::printf("%-5s %-5s %7s %10s %9s %9s %9s %10s %9s %7s\n", "res", "dtype", "S", "s/forward", "TFLOPS", "GEMM TF",
              "attn TF", "peak GiB", "J/forward", "mean W");
  for (const auto& pname : o.precisions) {
    const Precision p = precision_from_name(pname);
    gpu_reset_peak();
    auto t0 = clock_type::now();
    const DitStreaming streaming = bench_streaming(o, c, p);
    auto model = std::make_unique<DitModel>(ck, p, DistPlan::single(), Device::cuda, ctx.numerics(), streaming);
    gpu_synchronize();
    const double load_s = std::chrono::duration<double>(clock_type::now() - t0).count();
    const int resident = streaming.resident_blocks < 0 ? c.num_layers : streaming.resident_blocks;
    spdlog::info("{} model loaded in {:.1f} s ({:.1f} GiB of weights; {} of {} blocks resident on the GPU)", pname,
                 load_s, (model->replicated_bytes() + model->sharded_bytes()) / 1073741824.0, resident, c.num_layers);
    for (const auto& rname : o.res) {
      nlohmann::json row = bench_resolution(o, *model, c, rname, pname, load_s, energy);
      row["resident_blocks"] = resident;
      row["budget_gib"] = (gpu_budget_bytes() + kRuntimeReserve) / 1073741824.0;
      all.push_back(std::move(row));
    }
  }
  if (!o.partitions.empty()) bench_partitions(o, c, all);
  if (!o.json.empty()) write_bench_json(o.json, all);
  return 0;
}

}  // namespace

Runner add_bench(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("bench", "the full DiT on the GPU: time and energy per forward, TFLOPS, memory, regions");
  auto o = std::make_shared<BenchOpts>();
  add(cmd, opt::res, o->res);
  add(cmd, opt::precision, o->precisions);
  add(cmd, opt::dit_checkpoint, o->model);
  add(cmd, opt::reps, o->reps);
  cmd->add_option("--blocks", o->blocks, "use only the first N blocks (quick checks; 0 = all)");
  add(cmd, opt::json, o->json);
  cmd->add_option("--partitions", o->partitions,
                  "also time one rank's share of N-way Ulysses on this GPU (compute measured, exchange modelled)");
  add(cmd, opt::profile, o->profile);
  cmd->add_flag("--no-isolated", o->no_isolated, "skip the isolated per-region timings (faster)");
  cmd->add_option("--link-gbps", o->link_gbps, "bus bandwidth for the modelled all-to-alls (NVLink 4 NCCL: ~370)")
      ->capture_default_str();
  return [o](const GlobalContext& ctx) { return run_bench(*o, ctx); };
}

}  // namespace h3::cli

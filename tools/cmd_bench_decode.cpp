// h3 bench-decode: the full-size video VAE decoder (the released config, procedural weights) on the GPU at 768p and
// 480p x 124 frames. Per resolution and precision: the units decoded stacked `--batch` per ViT call (the memory rule
// by default) with their TFLOPS; the device stitch plus the download of every finished frame from those outputs;
// the whole decode as a consumer sees it (VideoVae::decode: units, device stitch, frames into one host clip); and for
// the N-way split of the sharded decode (model/vae/shard.h's assignment) the busiest rank's units decoded stacked on
// this one GPU. Then the full-size audio decode. Prints a table and writes JSON with --json.
//
// --profile: one more whole decode per resolution with the decoder's profile regions on (per-region device seconds).
// Timing a subset: --max-units K decodes only the first K units and scales their time by cost to the whole plan;
// such rows say "extrapolated from K of M units" and the whole-decode, stitch and split columns stay empty.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <tuple>

#include "backend/backend.h"
#include "commands.h"
#include "core/error.h"
#include "core/log.h"
#include "core/profile.h"
#include "io/procedural.h"
#include "model/qwen3vl/procedural.h"
#include "model/vae/audio_vae.h"
#include "model/vae/procedural.h"
#include "model/vae/shard.h"
#include "model/vae/video_vae.h"
#include "pipeline/noise.h"
#include "profile_json.h"

namespace h3::cli {

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

struct DecodeResolution {
  std::string name;
  int64_t height = 0, width = 0, frames = 0;
};

// 17n+5 pixel frames <-> 5n+2 latent frames (spec §3.1).
int64_t latent_frames_for(int64_t frames) {
  return (frames - 5) / 17 * 5 + 2;
}

// Analytic FLOPs of one ViT decoder call on a t x h x w latent block (multiply-add = 2): the block GEMMs, the
// attention's two products, and post_quant_conv / proj_in / proj_out. Element-wise work is not counted.
double unit_flops(const VideoVaeConfig& c, int64_t t, int64_t h, int64_t w) {
  const double V = static_cast<double>(t * h * w), N = V + static_cast<double>(c.decoder_num_register_tokens + 1);
  const double D = static_cast<double>(c.decoder_dim()), F = D * static_cast<double>(c.decoder_ffn_mult);
  const double lc = static_cast<double>(c.latent_channels);
  const double P = static_cast<double>(c.out_channels * c.temporal_ratio() * c.spatial_ratio() * c.spatial_ratio());
  const double per_layer = 2 * N * (4 * D * D + 2 * F * D + F * D) + 4 * N * N * D;
  return static_cast<double>(c.decoder_num_layers) * per_layer + 2 * V * (lc * lc + lc * D + D * P);
}

// Decodes the listed units stacked `batch` per ViT call (0 = the VAE's memory rule), GPU drained before and after;
// returns the seconds. `keep` receives the (device) outputs when given.
double time_units(const VideoVae& vae, const VideoDecodePlan& plan, const Tensor& zp, const std::vector<int64_t>& ids,
                  int64_t batch, std::vector<Tensor>* keep = nullptr) {
  std::vector<VideoDecodeUnit> units;
  for (int64_t u : ids) units.push_back(plan.units[u]);
  gpu_synchronize();
  const auto t0 = clock_type::now();
  std::vector<Tensor> out = vae.decode_units_on_device(zp, units, batch);
  gpu_synchronize();
  const double s = seconds_since(t0);
  if (keep) *keep = std::move(out);
  return s;
}

// One untimed stacked call per distinct (unit shape, units per call) that the timed runs will make: the plan's
// units stacked `batch` per call, each chunk row's (decode(): one row at a time), and each split rank's. cuDNN plans
// (the stacked attention's batch is part of its shape), GEMM algorithms and RoPE tables are made on first use.
void warm_up(const VideoVae& vae, const VideoDecodePlan& plan, const Tensor& zp, int64_t batch,
             const std::vector<std::vector<int64_t>>& runs) {
  auto shape_of = [&](int64_t u) {
    const VideoDecodeUnit& x = plan.units[u];
    return std::tuple{x.t1 - x.t0, x.y1 - x.y0, x.x1 - x.x0};
  };
  // decode_units_on_device's grouping: consecutive units of one shape, at most k per call.
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::vector<int64_t>> calls;
  for (const auto& ids : runs)
    for (size_t i = 0; i < ids.size();) {
      const auto [t, h, w] = shape_of(ids[i]);
      const int64_t k = batch > 0 ? batch : vae.batch_size(t, h, w);
      std::vector<int64_t> group;
      for (; i < ids.size() && static_cast<int64_t>(group.size()) < k && shape_of(ids[i]) == std::tuple{t, h, w}; ++i)
        group.push_back(ids[i]);
      calls.emplace(std::tuple{t, h, w, static_cast<int64_t>(group.size())}, group);
    }
  for (const auto& [key, ids] : calls) (void)time_units(vae, plan, zp, ids, batch);
}

struct BenchDecodeOpts {
  std::vector<std::string> res{"768p", "480p"}, precisions{"bf16", "f32"};
  std::vector<int> splits{2, 4, 8};
  int64_t frames = 124, max_units = 0, max_units_f32 = 16, layers = 0, batch = 0;
  uint64_t seed = kDefaultProceduralSeed;
  bool no_audio = false, profile = false;
  std::string json;
};

// The FLOPs of every resolution's decode (they do not depend on the run).
void print_flops(const VideoVaeConfig& cfg, int64_t T, const std::vector<DecodeResolution>& resolutions) {
  const int64_t r = cfg.spatial_ratio();
  for (const auto& res : resolutions) {
    const Shape zs{cfg.latent_channels, T, res.height / r, res.width / r};
    VideoDecodePlan plan;
    plan.latent_frames = T, plan.latent_height = zs[2], plan.latent_width = zs[3];
    plan.time = plan_temporal_chunks(T, cfg.clip_length, cfg.token_drop, cfg.temporal_ratio());
    plan.rows = split_tiles(res.height, cfg.tile_height, cfg.tile_overlap_height, r);
    plan.cols = split_tiles(res.width, cfg.tile_width, cfg.tile_overlap_width, r);
    add_decode_units(plan, r);
    double flops = 0;
    for (const auto& u : plan.units) flops += unit_flops(cfg, u.t1 - u.t0, u.y1 - u.y0, u.x1 - u.x0);
    const auto& u0 = plan.units[0];
    std::printf(
        "  %s x %lld frames: latents %s, %zu units (%zu chunks x %zu x %zu tiles) of %lld tokens, "
        "%.1f TFLOP per decode (%.2f TFLOP per unit)\n",
        res.name.c_str(), static_cast<long long>(res.frames), shape_str(zs).c_str(), plan.units.size(),
        plan.time.starts.size(), plan.rows.starts.size(), plan.cols.starts.size(),
        static_cast<long long>((u0.t1 - u0.t0) * (u0.y1 - u0.y0) * (u0.x1 - u0.x0) + cfg.decoder_num_register_tokens +
                               1),
        flops / 1e12, unit_flops(cfg, u0.t1 - u0.t0, u0.y1 - u0.y0, u0.x1 - u0.x0) / 1e12);
  }
  std::fflush(stdout);
}

// Prints the regions of a profiled whole decode of `m` units lasting `whole_s`.
void print_profile(const std::vector<profile::Total>& totals, double whole_s, int64_t m) {
  std::printf("      whole decode, profiled (%.3f s; regions are device-event spans, per unit = / %lld):\n", whole_s,
              static_cast<long long>(m));
  // Device time per region; the host's time inside it (about the device time where the host waits in
  // it); the device time just before its start since the previous mark (idle: the host had not issued it
  // yet). Host-only rows (cuda.malloc, cuda.host_copy) are host clock.
  std::printf("        %-24s %9s %7s %10s %7s %9s %11s\n", "region", "device s", "share", "ms/unit", "spans", "host s",
              "idle before");
  double sum = 0, idle = 0;
  for (const auto& tt : totals) {
    // vae.chunk_row_* span the regions inside them: shown, not summed.
    const bool outer = tt.name.find("chunk_row") != std::string::npos;
    if (!outer && !tt.host_only) sum += tt.seconds;
    idle += tt.idle_before;
    std::printf("        %-24s %9.3f %6.1f%% %10.3f %7d %9.3f %11.3f%s\n", tt.name.c_str(), tt.seconds,
                100 * tt.seconds / whole_s, 1e3 * tt.seconds / static_cast<double>(m), tt.spans, tt.host_seconds,
                tt.idle_before,
                outer          ? "  (spans the regions it contains)"
                : tt.host_only ? "  (host clock)"
                               : "");
  }
  std::printf("        %-24s %9.3f %6.1f%%  (host work and gaps between regions; idle before regions %.3f s)\n",
              "other", whole_s - sum, 100 * (whole_s - sum) / whole_s, idle);
}

// One whole decode with the profile regions on (profile.h): their totals (in `totals`, the decode's seconds in
// `whole_s`) as JSON.
nlohmann::json profiled_decode(const VideoVae& vae, const Tensor& z, const VideoDecodePlan& plan,
                               std::vector<profile::Total>& totals, double& whole_s) {
  nlohmann::json prof = nlohmann::json::object();
  profile::set_enabled(true);
  (void)profile::take();
  gpu_synchronize();
  const auto t2 = clock_type::now();
  const Tensor video = vae.decode(z);
  gpu_synchronize();
  whole_s = seconds_since(t2);
  totals = profile::take();
  profile::set_enabled(false);
  H3_CHECK(video.dim(1) == plan.time.out_frames, "bench-decode --profile: decoded {} frames, expected {}", video.dim(1),
           plan.time.out_frames);
  for (const auto& tt : totals) prof[tt.name] = profile_json(tt);
  prof["whole_decode_s"] = whole_s;
  return prof;
}

// The N-way splits: the busiest rank of the sharded decode's rule (largest load, then most units) decodes its units
// stacked as that rank would, timed on this GPU; a table row each into `split_lines`, and their JSON records.
nlohmann::json time_splits(const BenchDecodeOpts& o, const VideoVae& vae, const VideoDecodePlan& plan, const Tensor& zp,
                           int64_t batch, const std::vector<int64_t>& costs, double units_s, double flops,
                           double all_cost, const std::string& res_name, const std::string& pname,
                           std::vector<std::string>& split_lines) {
  nlohmann::json splits = nlohmann::json::array();
  for (int N : o.splits) {
    if (N == 1) continue;
    const ShardAssignment as = assign_balanced(costs, N);
    int busiest = 0;
    for (int rk = 1; rk < N; ++rk)
      if (as.load[rk] > as.load[busiest] ||
          (as.load[rk] == as.load[busiest] && as.units[rk].size() > as.units[busiest].size()))
        busiest = rk;
    const double mx = time_units(vae, plan, zp, as.units[busiest], batch);
    const size_t umax = as.units[busiest].size();
    split_lines.push_back(fmt::format("{:<5} {:<5} {:>3} {:>9} {:>12.3f} {:>8.2f} {:>9.0f}", res_name, pname, N, umax,
                                      mx, units_s / mx,
                                      flops * (static_cast<double>(as.load[busiest]) / all_cost) / mx / 1e12));
    splits.push_back({{"ranks", N},
                      {"busiest_rank", busiest},
                      {"max_units_per_rank", umax},
                      {"max_rank_s", mx},
                      {"speedup_vs_1", units_s / mx}});
  }
  return splits;
}

// One resolution at one precision: the units (all, or the first max_units extrapolated by cost), the stitch and
// the whole decode, the profiled decode, and the busiest rank of each N-way split. Prints the table row (the split
// rows go to `split_lines`) and returns the JSON record.
nlohmann::json bench_resolution(const BenchDecodeOpts& o, const VideoVaeConfig& cfg, const VideoVae& vae,
                                const std::string& pname, int64_t max_units, int64_t T, const DecodeResolution& res,
                                std::vector<std::string>& split_lines) {
  const int64_t r = cfg.spatial_ratio();
  const Tensor z = seeded_normal({cfg.latent_channels, T, res.height / r, res.width / r}, 7, 3);
  const VideoDecodePlan plan = vae.plan_decode(z.shape());
  const Tensor zp = vae.pad_latents(z, plan);
  const int64_t m = static_cast<int64_t>(plan.units.size());
  const auto& u0 = plan.units[0];
  const int64_t batch = o.batch > 0 ? o.batch : vae.batch_size(u0.t1 - u0.t0, u0.y1 - u0.y0, u0.x1 - u0.x0);
  double flops = 0;
  for (const auto& u : plan.units) flops += unit_flops(cfg, u.t1 - u.t0, u.y1 - u.y0, u.x1 - u.x0);
  const std::vector<int64_t> costs = video_unit_costs(plan);
  // All units (or the first max_units, their time scaled by cost) stacked `batch` per call, in plan order
  // (the 1-rank decode's order: a chunk row's tiles are consecutive).
  const int64_t timed = max_units > 0 ? std::min(max_units, m) : m;
  const bool extrapolated = timed < m;
  gpu_reset_peak();
  {
    std::vector<std::vector<int64_t>> runs(1);
    for (int64_t i = 0; i < timed; ++i) runs[0].push_back(i);
    const int64_t per_chunk = static_cast<int64_t>(plan.rows.starts.size() * plan.cols.starts.size());
    for (int64_t c0 = 0; !extrapolated && c0 < m; c0 += per_chunk) {
      runs.emplace_back();
      for (int64_t i = c0; i < std::min(m, c0 + per_chunk); ++i) runs.back().push_back(i);
    }
    for (int N : o.splits)
      if (N > 1 && !extrapolated)
        for (const auto& ids : assign_balanced(costs, N).units) runs.push_back(ids);
    warm_up(vae, plan, zp, batch, runs);
  }
  std::vector<int64_t> ids(static_cast<size_t>(timed));
  for (int64_t i = 0; i < timed; ++i) ids[i] = i;
  std::vector<Tensor> outputs;
  const double timed_s = time_units(vae, plan, zp, ids, batch, extrapolated ? nullptr : &outputs);
  double timed_cost = 0, all_cost = 0;
  for (int64_t u = 0; u < m; ++u) (u < timed ? timed_cost : all_cost) += static_cast<double>(costs[u]);
  all_cost += timed_cost;
  const double units_s = timed_s * all_cost / timed_cost;
  // The stitch and the download of every frame from the kept unit outputs, then the whole decode as a
  // consumer sees it (decode(): units, device stitch, frames downloaded into one host clip).
  double stitch_s = -1, whole_s = -1;
  if (!extrapolated) {
    const auto t0 = clock_type::now();
    int64_t frames = 0;
    vae.stitch_streaming(plan, outputs, [&](int64_t, const Tensor& f) { frames += f.dim(1); });
    stitch_s = seconds_since(t0);
    H3_CHECK(frames == plan.time.out_frames, "bench-decode: stitched {} frames, expected {}", frames,
             plan.time.out_frames);
    outputs.clear();
    const auto t1 = clock_type::now();
    const Tensor video = vae.decode(z);
    whole_s = seconds_since(t1);
    H3_CHECK(video.dim(1) == plan.time.out_frames, "bench-decode: decoded {} frames, expected {}", video.dim(1),
             plan.time.out_frames);
  }
  // One more whole decode with the regions on (profile.h): where its time goes.
  nlohmann::json prof = nlohmann::json::object();
  double prof_whole_s = -1;
  std::vector<profile::Total> totals;
  if (o.profile && !extrapolated) prof = profiled_decode(vae, z, plan, totals, prof_whole_s);
  const double peak = gpu_peak_bytes() / 1073741824.0;
  const std::string note =
      extrapolated ? fmt::format("units extrapolated from {} of {} timed", timed, m) : "all units timed";
  auto opt = [](double v) { return v < 0 ? std::string("-") : fmt::format("{:.3f}", v); };
  std::printf("%-5s %-5s %6lld %5lld %12s %11.3f %10.4f %9.0f %10s %8.1f  %s\n", res.name.c_str(), pname.c_str(),
              static_cast<long long>(m), static_cast<long long>(batch), opt(whole_s).c_str(), units_s,
              units_s / static_cast<double>(m), flops / units_s / 1e12, opt(stitch_s).c_str(), peak, note.c_str());
  if (!totals.empty()) print_profile(totals, prof_whole_s, m);
  std::fflush(stdout);
  auto opt_json = [](double v) { return v < 0 ? nlohmann::json() : nlohmann::json(v); };
  nlohmann::json rec = {{"res", res.name},
                        {"height", res.height},
                        {"width", res.width},
                        {"frames", res.frames},
                        {"precision", pname},
                        {"latent_shape", z.shape()},
                        {"units", m},
                        {"batch", batch},
                        {"units_timed", timed},
                        {"extrapolated", extrapolated},
                        {"flops", flops},
                        {"whole_decode_s", opt_json(whole_s)},
                        {"stitch_download_s", opt_json(stitch_s)},
                        {"units_gpu_s", units_s},
                        {"unit_s_mean", units_s / static_cast<double>(m)},
                        {"tflops_units", flops / units_s / 1e12},
                        {"peak_gib", peak},
                        {"profile", prof}};
  // The N-way splits (time_splits).
  rec["splits"] = extrapolated ? nlohmann::json::array()
                               : time_splits(o, vae, plan, zp, batch, costs, units_s, flops, all_cost, res.name, pname,
                                             split_lines);
  return rec;
}

// The full-size audio decode (released BigVGAN config, f32): the median of three after a warm-up.
nlohmann::json bench_audio(const BenchDecodeOpts& o) {
  const AudioVaeConfig ac;  // released
  const auto afile = procedural_audio_vae_weights(ac, o.seed, false, "procedural:full audio VAE decoder");
  const AudioVae avae(*afile, "", ac, Precision::f32, Device::cuda);
  const int64_t A = (o.frames * 40 + 12) / 24;  // round(frames / 24 * 40)
  const Tensor za = seeded_normal({2, ac.latent_channels, A}, 8, 3);
  (void)avae.decode(za);  // warm-up
  std::vector<double> ts;
  for (int i = 0; i < 3; ++i) {
    const auto t0 = clock_type::now();
    (void)avae.decode(za);
    ts.push_back(seconds_since(t0));
  }
  std::sort(ts.begin(), ts.end());
  std::printf(
      "\naudio VAE decode (released BigVGAN config, f32 on the GPU): [2, %lld, %lld] -> 2 x %lld samples: "
      "%.3f s (median of 3, host in/out included)\n",
      static_cast<long long>(ac.latent_channels), static_cast<long long>(A), static_cast<long long>(A * ac.hop()),
      ts[1]);
  return {{"audio", true}, {"latents", A}, {"samples", A * ac.hop()}, {"seconds", ts[1]}};
}

// The whole benchmark: the FLOPs, every precision x resolution, the split table, the audio decode.
int run_bench_decode(const BenchDecodeOpts& o) {
  H3_CHECK(gpu_backend_started(), "bench-decode runs on the GPU: pass --device cuda");
  H3_CHECK((o.frames - 5) % 17 == 0, "--frames {}: the decode takes 17n+5 frames (22, 39, ..., 124, ...)", o.frames);
  VideoVaeConfig cfg;  // the released configuration (spec §6.1)
  if (o.layers > 0) cfg.decoder_num_layers = std::min<int64_t>(o.layers, cfg.decoder_num_layers);
  const int64_t T = latent_frames_for(o.frames);
  std::vector<DecodeResolution> resolutions;
  for (const auto& n : o.res)
    resolutions.push_back(n == "768p" ? DecodeResolution{n, 768, 1344, o.frames}
                                      : DecodeResolution{n, 480, 832, o.frames});

  std::printf(
      "h3 bench-decode: video VAE ViT decoder, released config (%lld layers, dim %lld, %lld heads x %lld, "
      "ffn x%lld), procedural weights, %s\n",
      static_cast<long long>(cfg.decoder_num_layers), static_cast<long long>(cfg.decoder_dim()),
      static_cast<long long>(cfg.decoder_num_attention_heads), static_cast<long long>(cfg.decoder_attention_head_dim),
      static_cast<long long>(cfg.decoder_ffn_mult), gpu_description().c_str());
  print_flops(cfg, T, resolutions);

  auto t_load = clock_type::now();
  // Weights generated on the GPU as each VAE loads them (no host copy, no file).
  const auto vfile = procedural_video_vae_weights(cfg, o.seed, false, "procedural:full video VAE decoder");
  nlohmann::json all = nlohmann::json::array();
  std::printf("\n%-5s %-5s %6s %5s %12s %11s %10s %9s %10s %8s  %s\n", "res", "dtype", "units", "batch", "whole dec s",
              "units GPU s", "s/unit", "TFLOPS", "stitch+dl", "peak GB", "note");
  std::vector<std::string> split_lines;
  for (const auto& pname : o.precisions) {
    const Precision p = precision_from_name(pname);
    t_load = clock_type::now();
    auto vae = std::make_unique<VideoVae>(*vfile, "", cfg, p, Device::cuda);
    gpu_synchronize();
    spdlog::info("video VAE {} on the GPU in {:.1f} s", pname, seconds_since(t_load));
    const int64_t max_units = p == Precision::f32 ? o.max_units_f32 : o.max_units;
    for (const auto& res : resolutions)
      all.push_back(bench_resolution(o, cfg, *vae, pname, max_units, T, res, split_lines));
  }
  std::printf(
      "\nN-way unit split: the busiest rank's units decoded stacked on this GPU (its GPU compute); the "
      "gather and stitch are not included\n%-5s %-5s %3s %9s %12s %8s %9s\n",
      "res", "dtype", "N", "units/rk", "max rank s", "speedup", "TF/rank");
  for (const auto& l : split_lines) std::printf("%s\n", l.c_str());

  if (!o.no_audio) all.push_back(bench_audio(o));
  if (!o.json.empty()) write_bench_json(o.json, all);
  return 0;
}

}  // namespace

Runner add_bench_decode(CLI::App& app) {
  auto* cmd = app.add_subcommand(
      "bench-decode",
      "the full-size video VAE decode (procedural weights) on the GPU at 768p/480p x 124 frames: 1 rank and the "
      "per-rank share of the N-way unit split, TFLOPS; and the audio decode");
  auto o = std::make_shared<BenchDecodeOpts>();
  add(cmd, opt::res, o->res);
  add(cmd, opt::precision, o->precisions);
  cmd->add_option("--split", o->splits, "rank counts N of the unit split")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  add(cmd, opt::frames, o->frames);
  cmd->add_option("--max-units", o->max_units, "bf16: time only this many units and extrapolate (0 = all)")
      ->capture_default_str();
  cmd->add_option("--max-units-f32", o->max_units_f32, "f32: time only this many units and extrapolate (0 = all)")
      ->capture_default_str();
  cmd->add_option("--batch", o->batch, "units stacked per ViT call (0 = chosen by memory, at most 32)")
      ->capture_default_str();
  cmd->add_option("--layers", o->layers, "use only the first N decoder layers (quick checks; 0 = all 36)");
  add(cmd, opt::seed, o->seed);
  add(cmd, opt::no_audio, o->no_audio);
  add(cmd, opt::profile, o->profile);
  add(cmd, opt::json, o->json);
  return [o](const GlobalContext&) -> int { return run_bench_decode(*o); };
}

}  // namespace h3::cli

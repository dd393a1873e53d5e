// h3 info PATH: what a checkpoint is (layout, config, dtypes, parameters, bytes), read from headers only.
#include <algorithm>
#include <filesystem>
#include <memory>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "model/dit/checkpoint.h"
#include "model/dit/dit.h"
#include "model/dit/lora.h"

namespace h3::cli {

Runner add_info(CLI::App& app) {
  auto* cmd =
      app.add_subcommand("info", "describe a DiT checkpoint (file, folder or procedural:NAME) without loading it");
  struct Opts {
    std::string path, qkv, mode = "ulysses", precision = "bf16", lora_for = "procedural:full";
    int tp = 1, ranks_per_host = 0;
    int64_t seq = 37830;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("path", o->path, "checkpoint file, folder, or procedural:mini|fullwidth-1block|full[:seed=N]")
      ->required();
  cmd->add_option("--qkv-layout", o->qkv, "qkv_proj row order of released-name files: interleaved or blocked")
      ->check(CLI::IsMember({"interleaved", "blocked"}));
  add(cmd, opt::mode, o->mode);
  add(cmd, opt::tp, o->tp);
  cmd->add_option("--ranks-per-host", o->ranks_per_host,
                  "with --ranks N: also the memory per host, hosts filled in rank order (default: every rank on one)")
      ->check(CLI::Range(1, 4096));
  add(cmd, opt::seq, o->seq);
  add(cmd, opt::precision, o->precision);
  cmd->add_option("--lora-for", o->lora_for, "LORA files: the DiT they are checked against")->capture_default_str();
  return [o](const GlobalContext& ctx) -> int {
    if (o->path.ends_with(".safetensors") && std::filesystem::exists(o->path) && looks_like_lora(o->path)) {
      DitCheckpoint base = DitCheckpoint::open(o->lora_for);
      LoraFile lf = LoraFile::open(o->path, 1.0, base.config());
      std::printf("%s\n(checked against the config of %s)\n", lf.describe().c_str(), o->lora_for.c_str());
      return 0;
    }
    DitCheckpointOptions opt;
    if (o->qkv == "interleaved") opt.qkv_order = QkvOrder::interleaved;
    if (o->qkv == "blocked") opt.qkv_order = QkvOrder::blocked;
    DitCheckpoint ck = DitCheckpoint::open(o->path, opt);
    const DitConfig& c = ck.config();
    std::printf("checkpoint   %s\n", o->path.c_str());
    std::printf("layout       %s\n", std::string(layout_name(ck.layout())).c_str());
    std::printf("detected     %s\n", ck.detection_summary().c_str());
    std::printf("files        %zu\n", ck.files().size());
    std::printf(
        "config       %d blocks + %d refiner, %d heads x %d (inner %d), hidden %d, ffn %d, text %d, "
        "time %d/%d, rope_freq_dim %d\n",
        c.num_layers, c.num_refiner_layers, c.num_attention_heads, c.attention_head_dim, c.inner_dim(), c.hidden_size,
        c.ffn_dim, c.text_dim, c.time_embed_hidden_dim, c.time_embed_dim, c.rope_freq_dim);
    std::string dts;
    for (const auto& [dt, n] : ck.dtype_counts())
      dts += fmt::format("{}{} x{}", dts.empty() ? "" : ", ", dtype_name(dt), n);
    std::printf("dtypes       %s\n", dts.c_str());
    std::string qs;
    for (const auto& [f, n] : ck.quant_counts()) qs += fmt::format("{}{} x{}", qs.empty() ? "" : ", ", f, n);
    std::printf("quantized    %s\n", qs.empty() ? "none" : (qs + " (dequantized to f32 on load)").c_str());
    std::printf("parameters   %lld (%.3f B)\n", static_cast<long long>(c.parameter_count()), c.parameter_count() / 1e9);
    std::printf("bytes        %zu (%.2f GB as stored)\n", ck.stored_bytes(), ck.stored_bytes() / 1e9);
    const int n = ctx.ranks;
    if (n > 1) {
      const DistMode mode = dist_mode_from_name(o->mode);
      const int K = mode == DistMode::tensor ? n : (mode == DistMode::hybrid ? o->tp : 1);
      if (K < 1 || n % K != 0) fail("--tp {} must divide --ranks {}", o->tp, n);
      const int U = n / K;
      const size_t es = o->precision == "f64" ? 8 : (o->precision == "f32" ? 4 : 2);
      std::printf("\nper-rank memory, %s on %d ranks (tensor %d x sequence %d), %s, packed length %lld\n",
                  o->mode.c_str(), n, K, U, o->precision.c_str(), static_cast<long long>(o->seq));
      std::printf("%5s %8s %8s %14s %14s %14s %16s\n", "rank", "heads", "ffn", "replicated_GB", "sharded_GB",
                  "weights_GB", "largest_act_MB");
      const int per_host = o->ranks_per_host > 0 ? std::min(o->ranks_per_host, n) : n;
      const int hosts = (n + per_host - 1) / per_host;
      std::vector<double> host_weights(hosts, 0), host_act(hosts, 0);
      for (int r = 0; r < n; ++r) {
        DitShard s = DitShard::of(c, mode, K, U, r % K, r / K, n, o->seq);
        std::printf("%5d %8lld %8lld %14.3f %14.3f %14.3f %16.1f\n", r,
                    static_cast<long long>(mode == DistMode::ulysses_ag ? s.heads_qkv.size() : s.heads_out.size()),
                    static_cast<long long>(s.ffn.size()), s.replicated_params * es / 1e9, s.sharded_params * es / 1e9,
                    (s.replicated_params + s.sharded_params) * es / 1e9, s.largest_activation_elems * es / 1e6);
        host_weights[r / per_host] += (s.replicated_params + s.sharded_params) * es / 1e9;
        host_act[r / per_host] += s.largest_activation_elems * es / 1e6;
      }
      // Per host: the sum over its ranks (every rank's largest activation at once: an upper bound).
      std::printf("\nper-host memory, %d host(s) x %d rank(s) (hosts filled in rank order, as mpirun and srun do)\n",
                  hosts, per_host);
      std::printf("%5s %11s %14s %16s\n", "host", "ranks", "weights_GB", "largest_act_MB");
      for (int h = 0; h < hosts; ++h)
        std::printf("%5d %11s %14.3f %16.1f\n", h,
                    fmt::format("{}-{}", h * per_host, std::min(n, (h + 1) * per_host) - 1).c_str(), host_weights[h],
                    host_act[h]);
    }
    return 0;
  };
}

}  // namespace h3::cli

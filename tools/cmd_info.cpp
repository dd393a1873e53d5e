// h3 info PATH: what a checkpoint is (layout, config, dtypes, parameters, bytes), read from headers only.
#include <memory>

#include "commands.h"
#include "io/checkpoint.h"

namespace h3::cli {

Runner add_info(CLI::App& app) {
  auto* cmd = app.add_subcommand("info", "describe a DiT checkpoint (file, folder or procedural:NAME) without loading it");
  struct Opts {
    std::string path, qkv;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("path", o->path, "checkpoint file, folder, or procedural:mini|fullwidth-1block|full[:seed=N]")
      ->required();
  cmd->add_option("--qkv-layout", o->qkv, "qkv_proj row order of released-name files: interleaved or blocked")
      ->check(CLI::IsMember({"interleaved", "blocked"}));
  return [o]() -> int {
    DitCheckpointOptions opt;
    if (o->qkv == "interleaved") opt.qkv_order = QkvOrder::interleaved;
    if (o->qkv == "blocked") opt.qkv_order = QkvOrder::blocked;
    DitCheckpoint ck = DitCheckpoint::open(o->path, opt);
    const DitConfig& c = ck.config();
    std::printf("checkpoint   %s\n", o->path.c_str());
    std::printf("layout       %s\n", std::string(layout_name(ck.layout())).c_str());
    std::printf("detected     %s\n", ck.detection_summary().c_str());
    std::printf("files        %zu\n", ck.files().size());
    std::printf("config       %d blocks + %d refiner, %d heads x %d (inner %d), hidden %d, ffn %d, text %d, "
                "time %d/%d, rope_freq_dim %d\n",
                c.num_layers, c.num_refiner_layers, c.num_attention_heads, c.attention_head_dim, c.inner_dim(),
                c.hidden_size, c.ffn_dim, c.text_dim, c.time_embed_hidden_dim, c.time_embed_dim, c.rope_freq_dim);
    std::string dts;
    for (const auto& [dt, n] : ck.dtype_counts()) dts += fmt::format("{}{} x{}", dts.empty() ? "" : ", ", dtype_name(dt), n);
    std::printf("dtypes       %s\n", dts.c_str());
    std::printf("parameters   %lld (%.3f B)\n", static_cast<long long>(c.parameter_count()), c.parameter_count() / 1e9);
    std::printf("bytes        %zu (%.2f GB as stored)\n", ck.stored_bytes(), ck.stored_bytes() / 1e9);
    return 0;
  };
}

}  // namespace h3::cli

// h3 convert SRC -o OUT: any accepted DiT checkpoint (file, folder, procedural:NAME) to one safetensors file with
// diffusers (or released / ComfyUI) names, in f32 or bf16, optionally with LoRAs baked in (--lora) and the blocks'
// GEMM weights quantized (--quant, io/quant.h). Used to materialise procedural weights once so that ranks share one
// mapped file.
#include <map>
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "dist/comm.h"
#include "io/quant.h"
#include "model/dit/checkpoint.h"
#include "model/dit/export.h"
#include "model/dit/lora.h"

namespace h3::cli {

Runner add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "write a DiT checkpoint as one diffusers-named safetensors file");
  struct Opts {
    std::string src, out, dtype = "f32", quant, layout = "diffusers";
    std::vector<std::string> loras;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("src", o->src, "checkpoint file, folder or procedural:NAME")->required();
  cmd->add_option("-o,--output", o->out, "output .safetensors path")->required();
  cmd->add_option("--dtype", o->dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  cmd->add_option("--lora", o->loras, "bake this LoRA in, FILE[:STRENGTH] (repeatable)");
  cmd->add_option("--quant", o->quant,
                  "quantize the blocks' GEMM weights: fp8, scaled_fp8, int8, int8-convrot, nvfp4 or mxfp8")
      ->check(CLI::IsMember({"fp8", "scaled_fp8", "int8", "int8-convrot", "nvfp4", "mxfp8"}));
  cmd->add_option("--layout", o->layout, "diffusers, official (released names, interleaved qkv) or comfy")
      ->check(CLI::IsMember({"diffusers", "official", "comfy"}))
      ->capture_default_str();
  return [o]() -> int {
    if (world().rank() != 0) return 0;
    DitCheckpoint ck = DitCheckpoint::open(o->src);
    add_loras(ck, o->loras, 0);
    const DType dt = o->dtype == "bf16" ? DType::bf16 : DType::f32;
    std::vector<std::pair<std::string, Tensor>> tensors;
    std::map<std::string, std::string> meta;
    export_dit(ck, dt, export_layout_from_name(o->layout), quant_format_from_name(o->quant), tensors, meta);
    meta["converted_from"] = o->src;
    for (const auto& l : ck.loras()) meta["converted_from"] += fmt::format(" + LoRA {}:{}", l->path, l->strength);
    write_safetensors(o->out, tensors, meta);
    size_t bytes = 0;
    for (const auto& [k, t] : tensors) bytes += t.nbytes();
    std::printf("wrote %s: %zu tensors, %s, layout %s, quant %s, %.3f GB, from %s\n", o->out.c_str(), tensors.size(),
                o->dtype.c_str(), o->layout.c_str(), o->quant.empty() ? "none" : o->quant.c_str(), bytes / 1e9,
                ck.detection_summary().c_str());
    return 0;
  };
}

}  // namespace h3::cli

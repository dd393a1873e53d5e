// h3 convert SRC -o OUT: any accepted DiT checkpoint (file, folder, procedural:NAME) to one safetensors file with
// diffusers (or released / ComfyUI) names, in f32 or bf16, optionally with LoRAs baked in (--lora) and the blocks'
// GEMM weights quantized (--quant, io/quant.h). Used to materialise procedural weights once so that ranks share one
// mapped file. Streamed (one tensor in memory at a time) and, with a GPU, made there: procedural:full with FP8
// takes about as long as writing its bytes.
#include <map>
#include <memory>

#include "backend/backend.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/log.h"
#include "distributed/comm.h"
#include "io/quant.h"
#include "model/dit/checkpoint.h"
#include "model/dit/export.h"
#include "model/dit/lora.h"

namespace h3::cli {

Runner add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "write a DiT checkpoint as one diffusers-named safetensors file");
  struct Opts {
    std::string src, out, dtype = "f32", quant, layout = "diffusers", gpu = "auto";
    std::vector<std::string> loras;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("src", o->src, "checkpoint file, folder or procedural:NAME")->required();
  add(cmd, opt::output, o->out);
  cmd->add_option("--dtype", o->dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  add(cmd, opt::lora, o->loras);
  cmd->add_option("--quant", o->quant,
                  "quantize the blocks' GEMM weights: fp8, scaled_fp8, int8, int8-convrot, nvfp4 or mxfp8")
      ->check(CLI::IsMember({"fp8", "scaled_fp8", "int8", "int8-convrot", "nvfp4", "mxfp8"}));
  cmd->add_option("--layout", o->layout, "diffusers, official (released names, interleaved qkv) or comfy")
      ->check(CLI::IsMember({"diffusers", "official", "comfy"}))
      ->capture_default_str();
  cmd->add_option("--gpu", o->gpu,
                  "make the tensors on the GPU (generate, fuse, FP8-quantize there): auto (when one is visible), on, "
                  "off; the file is the same bytes either way")
      ->check(CLI::IsMember({"auto", "on", "off"}))
      ->capture_default_str();
  return [o](const GlobalContext& ctx) -> int {
    if (world().rank() != 0) return 0;
    const bool gpu = o->gpu == "on" || (o->gpu == "auto" && (gpu_backend_started() || gpu_count() > 0));
    // Refused before any work: the output is written while the checkpoint and LoRAs are read (`h3 convert F -o F`
    // replaced a 102-tensor file with 62 tensors, exit 0).
    std::vector<std::string> inputs = {o->src};
    for (const std::string& l : o->loras) {
      inputs.push_back(l);                          // FILE
      inputs.push_back(l.substr(0, l.rfind(':')));  // FILE:STRENGTH
    }
    check_output_not_input(o->out, inputs, "-o");
    check_output_file(o->out, "-o");
    if (gpu) {
      GpuOptions g = ctx.gpu;
      g.rank = 0;
      start_gpu_backend(g);
    }
    DitCheckpoint ck = DitCheckpoint::open(o->src);
    add_loras(ck, o->loras, 0);
    const DType dt = o->dtype == "bf16" ? DType::bf16 : DType::f32;
    ExportPlan plan = plan_export_dit(ck, dt, export_layout_from_name(o->layout), quant_format_from_name(o->quant));
    plan.metadata["converted_from"] = o->src;
    for (const auto& l : ck.loras())
      plan.metadata["converted_from"] += fmt::format(" + LoRA {}:{}", l->path, l->strength);
    const ExportStats st = write_export(plan, o->out, gpu ? Device::cuda : Device::cpu);
    std::printf(
        "wrote %s: %zu tensors, %s, layout %s, quant %s, %.3f GB in %.1f s (%.2f GB/s, made on the %s), from %s\n",
        o->out.c_str(), plan.entries().size(), o->dtype.c_str(), o->layout.c_str(),
        o->quant.empty() ? "none" : o->quant.c_str(), st.file_bytes / 1e9, st.seconds,
        st.seconds > 0 ? st.file_bytes / 1e9 / st.seconds : 0.0, gpu ? "GPU" : "CPU", ck.detection_summary().c_str());
    return 0;
  };
}

}  // namespace h3::cli

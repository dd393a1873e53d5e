// h3 convert SRC -o OUT: any accepted DiT checkpoint (file, folder, procedural:NAME) to one safetensors file with
// diffusers names, in f32 or bf16. Used to materialise procedural weights once so that ranks share one mapped file.
#include <memory>

#include "commands.h"
#include "core/error.h"
#include "dist/comm.h"
#include "io/checkpoint.h"

namespace h3::cli {

Runner add_convert(CLI::App& app) {
  auto* cmd = app.add_subcommand("convert", "write a DiT checkpoint as one diffusers-named safetensors file");
  struct Opts {
    std::string src, out, dtype = "f32";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("src", o->src, "checkpoint file, folder or procedural:NAME")->required();
  cmd->add_option("-o,--output", o->out, "output .safetensors path")->required();
  cmd->add_option("--dtype", o->dtype, "f32 or bf16")->check(CLI::IsMember({"f32", "bf16"}))->capture_default_str();
  return [o]() -> int {
    if (world().rank() != 0) return 0;
    DitCheckpoint ck = DitCheckpoint::open(o->src);
    const DType dt = o->dtype == "bf16" ? DType::bf16 : DType::f32;
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (const auto& [key, shape] : ck.config().parameters()) {
      Tensor t = ck.get(key);
      tensors.emplace_back(key, t.dtype() == dt ? t : t.to(dt));
    }
    write_safetensors(o->out, tensors,
                      {{"config", ck.config().to_json_text()}, {"converted_from", o->src}, {"format", "h3 diffusers"}});
    std::printf("wrote %s: %zu tensors, %s, %.2f GB, from %s\n", o->out.c_str(), tensors.size(), o->dtype.c_str(),
                static_cast<double>(ck.config().parameter_count()) * dtype_size(dt) / 1e9, ck.detection_summary().c_str());
    return 0;
  };
}

}  // namespace h3::cli

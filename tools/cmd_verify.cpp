// h3 verify FILE: runs the engine on a golden file's inputs and compares with the reference outputs.
#include <memory>

#include "commands.h"
#include "distributed/comm.h"
#include "verify/dit.h"
#include "verify/layouts.h"
#include "verify/pipeline.h"
#include "verify/qwen3vl_text.h"
#include "verify/qwen3vl_vision.h"
#include "verify/vae.h"

namespace h3::cli {

Runner add_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "check the engine against a golden-format file; last line PASS or FAIL");
  struct Opts {
    std::string file, precision = "f64", weights;
    double tol = -1;
    std::string dump, mode;
    int tp = 1, chunks = 1;
    std::string tokenizer;    // FILE.json = tokenizer cases for this tokenizer.json
    std::string bf16_errors;  // the reference's own bf16 errors on a golden set (Qwen3-VL text)
    std::vector<std::string> loras;
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("file", o->file, "golden safetensors file")->required();
  cmd->add_option("--precision", o->precision, "f64, f32 or bf16 (the released mixed recipe)")
      ->check(CLI::IsMember({"f64", "f32", "bf16", "fp8"}))
      ->envname("H3_PRECISION");
  cmd->add_option("--weights", o->weights, "use these DiT weights (file, folder or procedural:NAME) instead");
  cmd->add_option("--tol", o->tol, "override the rel-L2 tolerance");
  cmd->add_option("--mode", o->mode, "with --ranks N: ulysses, ulysses-ag, tensor or hybrid")
      ->check(CLI::IsMember({"ulysses", "ulysses-ag", "tensor", "hybrid"}));
  cmd->add_option("--tp", o->tp, "hybrid: tensor-parallel degree");
  cmd->add_option("--chunks", o->chunks, "pieces each exchange is issued in");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "with FILE.json: check FILE's tokenizer cases against this tokenizer.json")
      ->envname("H3_TOKENIZER");
  cmd->add_option("--bf16-errors", o->bf16_errors,
                  "Qwen3-VL text golden sets in bf16: JSON of the reference's own bf16 rel-L2 per output; the "
                  "bound is 1.5x each");
  cmd->add_option("--lora", o->loras,
                  "DiT sets: LoRA merged on load, FILE[:STRENGTH] (repeatable; the golden "
                  "outputs must have been made with the same LoRA)");
  cmd->add_option("--dump", o->dump, "write every named activation to PREFIX[.case].safetensors (debugging)");
  return [o, cmd]() -> int {
    if (o->file.ends_with(".json") && !o->tokenizer.empty()) {
      std::printf("verify %s: tokenizer cases, tokenizer %s\n", o->file.c_str(), o->tokenizer.c_str());
      VerifyReport rep = verify_tokenizer_cases(o->file, o->tokenizer);
      rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (o->file.ends_with(".json")) {
      std::printf("FAIL: %s is JSON; for tokenizer cases pass --tokenizer PATH/tokenizer.json\n", o->file.c_str());
      return 1;
    }
    SafeTensors f = SafeTensors::open(o->file);
    if (looks_like_pipeline_golden(f)) {
      PipelineVerifyOptions po;
      po.precision = precision_from_name(o->precision == "f64" && !cmd->count("--precision") ? "f32" : o->precision);
      if (o->tol > 0) po.tolerance = o->tol;
      po.dit_weights = o->weights;
      po.device = g_device == "cuda" ? Device::cuda : Device::cpu;
      if (!o->mode.empty() || world().size() > 1)
        po.dist = DistOptions{dist_mode_from_name(o->mode.empty() ? "ulysses" : o->mode), o->tp, o->chunks, ""};
      const bool root = world().rank() == 0;
      if (root)
        std::printf("verify %s: t2va pipeline set, precision %s, %d rank(s) on the %s\n", o->file.c_str(),
                    precision_name(po.precision).data(), world().size(), g_device == "cuda" ? "GPU" : "CPU");
      VerifyReport rep = verify_pipeline_file(f, po);
      if (root) rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (looks_like_dit_golden(f)) {
      VerifyOptions vo;
      vo.precision = precision_from_name(o->precision);
      vo.weights = o->weights;
      vo.loras = o->loras;
      if (o->tol > 0) vo.tolerance = o->tol;
      vo.dump_prefix = o->dump;
      vo.device = g_device == "cuda" ? Device::cuda : Device::cpu;
      vo.numerics = g_numerics;
      if (!o->mode.empty() || world().size() > 1)
        vo.dist =
            DistOptions{dist_mode_from_name(o->mode.empty() ? "ulysses" : o->mode), o->tp, o->chunks, "", g_transport};
      const bool root = world().rank() == 0;
      if (root)
        std::printf("verify %s: DiT golden set, precision %s on the %s\n", o->file.c_str(), o->precision.c_str(),
                    g_device == "cuda" ? "GPU" : "CPU");
      VerifyReport rep = verify_dit_file(f, vo);
      if (root) rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (looks_like_layout_golden(f)) {
      std::printf("verify %s: layout and schedule set\n", o->file.c_str());
      return verify_layouts(f, stdout);
    }
    if (looks_like_video_vae_golden(f)) {
      Comm* comm = world().size() > 1 ? &world() : nullptr;
      const bool root = world().rank() == 0;
      if (root)
        std::printf("verify %s: video VAE golden set, precision %s, decode on %d rank(s) on the %s\n", o->file.c_str(),
                    o->precision.c_str(), world().size(), g_device == "cuda" ? "GPU" : "CPU");
      VerifyReport rep = verify_video_vae_file(f, precision_from_name(o->precision), comm,
                                               g_device == "cuda" ? Device::cuda : Device::cpu);
      if (root) rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (looks_like_audio_vae_golden(f)) {
      Comm* comm = world().size() > 1 ? &world() : nullptr;
      const bool root = world().rank() == 0;
      if (root)
        std::printf("verify %s: audio VAE golden set, precision %s, decode on %d rank(s) on the %s\n", o->file.c_str(),
                    o->precision.c_str(), world().size(), g_device == "cuda" ? "GPU" : "CPU");
      VerifyReport rep = verify_audio_vae_file(f, precision_from_name(o->precision), comm,
                                               g_device == "cuda" ? Device::cuda : Device::cpu);
      if (root) rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (looks_like_qwen3vl_vision_golden(f)) {
      std::printf("verify %s: Qwen3-VL vision golden set, precision %s on the %s\n", o->file.c_str(),
                  o->precision.c_str(), g_device == "cuda" ? "GPU" : "CPU");
      VerifyReport rep = verify_qwen3vl_vision_file(f, precision_from_name(o->precision),
                                                    g_device == "cuda" ? Device::cuda : Device::cpu, o->tol);
      rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (looks_like_qwen3vl_text_procedural_reference(f)) {
      Comm* comm = world().size() > 1 ? &world() : nullptr;
      const bool root = world().rank() == 0;
      if (root)
        std::printf(
            "verify %s: Qwen3-VL text tower reference (procedural weights), precision %s on the %s, %d rank(s)\n",
            o->file.c_str(), o->precision.c_str(), g_device == "cuda" ? "GPU" : "CPU", world().size());
      VerifyReport rep = verify_qwen3vl_text_procedural(f, precision_from_name(o->precision), comm,
                                                        g_device == "cuda" ? Device::cuda : Device::cpu, o->tol);
      if (root) rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    if (looks_like_qwen3vl_text_golden(f)) {
      Comm* comm = world().size() > 1 ? &world() : nullptr;
      const bool root = world().rank() == 0;
      if (root)
        std::printf(
            "verify %s: Qwen3-VL text decoder golden set, precision %s on the %s, %d rank(s) "
            "tensor-parallel\n",
            o->file.c_str(), o->precision.c_str(), g_device == "cuda" ? "GPU" : "CPU", world().size());
      VerifyReport rep =
          verify_qwen3vl_text_file(f, precision_from_name(o->precision), comm,
                                   g_device == "cuda" ? Device::cuda : Device::cpu, o->tol, o->bf16_errors);
      if (root) rep.print(stdout);
      return rep.pass() ? 0 : 1;
    }
    std::printf("FAIL: %s is not a golden set this version can verify (DiT sets, layout sets)\n", o->file.c_str());
    return 1;
  };
}

}  // namespace h3::cli

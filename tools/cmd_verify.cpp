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

namespace {

struct VerifyOpts {
  std::string file, precision = "f64", weights;
  double tol = -1;
  std::string dump, mode;
  int tp = 1, chunks = 1;
  std::string tokenizer;    // FILE.json = tokenizer cases for this tokenizer.json
  std::string bf16_errors;  // the reference's own bf16 errors on a golden set (Qwen3-VL text)
  std::vector<std::string> loras;
};

int verdict(const VerifyReport& rep, bool print) {
  if (print) rep.print(stdout);
  return rep.pass() ? 0 : 1;
}

// A t2va pipeline set: f32 unless --precision says otherwise (the file's f64 default suits the model sets).
int verify_pipeline(const SafeTensors& f, const VerifyOpts& o, bool precision_given, const GlobalContext& ctx) {
  PipelineVerifyOptions po;
  po.precision = precision_from_name(o.precision == "f64" && !precision_given ? "f32" : o.precision);
  if (o.tol > 0) po.tolerance = o.tol;
  po.dit_weights = o.weights;
  po.device = ctx.compute_device();
  if (!o.mode.empty() || world().size() > 1)
    po.dist = DistOptions{dist_mode_from_name(o.mode.empty() ? "ulysses" : o.mode), o.tp, o.chunks, ""};
  const bool root = world().rank() == 0;
  if (root)
    std::printf("verify %s: t2va pipeline set, precision %s, %d rank(s) on the %s\n", o.file.c_str(),
                precision_name(po.precision).data(), world().size(), ctx.processor());
  return verdict(verify_pipeline_file(f, po), root);
}

int verify_dit(const SafeTensors& f, const VerifyOpts& o, const GlobalContext& ctx) {
  VerifyOptions vo;
  vo.precision = precision_from_name(o.precision);
  vo.weights = o.weights;
  vo.loras = o.loras;
  if (o.tol > 0) vo.tolerance = o.tol;
  vo.dump_prefix = o.dump;
  vo.device = ctx.compute_device();
  vo.numerics = ctx.numerics();
  if (!o.mode.empty() || world().size() > 1)
    vo.dist = DistOptions{dist_mode_from_name(o.mode.empty() ? "ulysses" : o.mode), o.tp, o.chunks, "", ctx.transport};
  const bool root = world().rank() == 0;
  if (root)
    std::printf("verify %s: DiT golden set, precision %s on the %s\n", o.file.c_str(), o.precision.c_str(),
                ctx.processor());
  return verdict(verify_dit_file(f, vo), root);
}

// The sets of the other models: the VAE decoders and the Qwen3-VL towers; -1 when `f` is none of them.
int verify_other_models(const SafeTensors& f, const VerifyOpts& o, const GlobalContext& ctx) {
  Comm* comm = world().size() > 1 ? &world() : nullptr;
  const bool root = world().rank() == 0;
  const Precision prec = precision_from_name(o.precision);
  const Device dev = ctx.compute_device();
  if (looks_like_video_vae_golden(f)) {
    if (root)
      std::printf("verify %s: video VAE golden set, precision %s, decode on %d rank(s) on the %s\n", o.file.c_str(),
                  o.precision.c_str(), world().size(), ctx.processor());
    return verdict(verify_video_vae_file(f, prec, comm, dev), root);
  }
  if (looks_like_audio_vae_golden(f)) {
    if (root)
      std::printf("verify %s: audio VAE golden set, precision %s, decode on %d rank(s) on the %s\n", o.file.c_str(),
                  o.precision.c_str(), world().size(), ctx.processor());
    return verdict(verify_audio_vae_file(f, prec, comm, dev), root);
  }
  if (looks_like_qwen3vl_vision_golden(f)) {
    std::printf("verify %s: Qwen3-VL vision golden set, precision %s on the %s\n", o.file.c_str(), o.precision.c_str(),
                ctx.processor());
    return verdict(verify_qwen3vl_vision_file(f, prec, dev, o.tol), true);
  }
  if (looks_like_qwen3vl_text_procedural_reference(f)) {
    if (root)
      std::printf("verify %s: Qwen3-VL text tower reference (procedural weights), precision %s on the %s, %d rank(s)\n",
                  o.file.c_str(), o.precision.c_str(), ctx.processor(), world().size());
    return verdict(verify_qwen3vl_text_procedural(f, prec, comm, dev, o.tol), root);
  }
  if (looks_like_qwen3vl_text_golden(f)) {
    if (root)
      std::printf(
          "verify %s: Qwen3-VL text decoder golden set, precision %s on the %s, %d rank(s) "
          "tensor-parallel\n",
          o.file.c_str(), o.precision.c_str(), ctx.processor(), world().size());
    return verdict(verify_qwen3vl_text_file(f, prec, comm, dev, o.tol, o.bf16_errors), root);
  }
  return -1;
}

int run_verify(const VerifyOpts& o, bool precision_given, const GlobalContext& ctx) {
  if (o.file.ends_with(".json") && !o.tokenizer.empty()) {
    std::printf("verify %s: tokenizer cases, tokenizer %s\n", o.file.c_str(), o.tokenizer.c_str());
    return verdict(verify_tokenizer_cases(o.file, o.tokenizer), true);
  }
  if (o.file.ends_with(".json")) {
    std::printf("FAIL: %s is JSON; for tokenizer cases pass --tokenizer PATH/tokenizer.json\n", o.file.c_str());
    return 1;
  }
  SafeTensors f = SafeTensors::open(o.file);
  if (looks_like_pipeline_golden(f)) return verify_pipeline(f, o, precision_given, ctx);
  if (looks_like_dit_golden(f)) return verify_dit(f, o, ctx);
  if (looks_like_layout_golden(f)) {
    std::printf("verify %s: layout and schedule set\n", o.file.c_str());
    return verify_layouts(f, stdout);
  }
  if (const int status = verify_other_models(f, o, ctx); status >= 0) return status;
  std::printf("FAIL: %s is not a golden set this version can verify (DiT sets, layout sets)\n", o.file.c_str());
  return 1;
}

}  // namespace

Runner add_verify(CLI::App& app) {
  auto* cmd = app.add_subcommand("verify", "check the engine against a golden-format file; last line PASS or FAIL");
  auto o = std::make_shared<VerifyOpts>();
  cmd->add_option("file", o->file, "golden safetensors file")->required();
  add(cmd, opt::precision, o->precision);
  add(cmd, opt::weights, o->weights);
  cmd->add_option("--tol", o->tol, "override the rel-L2 tolerance");
  add_dist(cmd, o->mode, o->tp, o->chunks);
  add(cmd, opt::tokenizer, o->tokenizer);
  cmd->add_option("--bf16-errors", o->bf16_errors,
                  "Qwen3-VL text golden sets in bf16: JSON of the reference's own bf16 rel-L2 per output; the "
                  "bound is 1.5x each");
  add(cmd, opt::lora, o->loras);
  cmd->add_option("--dump", o->dump, "write every named activation to PREFIX[.case].safetensors (debugging)");
  return [o, cmd](const GlobalContext& ctx) { return run_verify(*o, cmd->count("--precision") > 0, ctx); };
}

}  // namespace h3::cli

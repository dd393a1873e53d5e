// The options several commands take, one row each (options.h). Each row: names, environment variable, help, the
// values or check, and the commands that take it with what each keeps of its own (values, variable, shown default).
#include "options.h"

#include <cmath>
#include <cstdio>
#include <stdexcept>

#include "core/byte_size.h"
#include "core/log.h"
#include "pipeline/generator.h"

namespace h3::cli {

CLI::Validator finite_range(double lo, double hi) {
  auto str = [](double v) {
    char b[32];
    std::snprintf(b, sizeof(b), "%g", v);
    return std::string(b);
  };
  return CLI::Validator(
      [lo, hi, str](std::string& v) -> std::string {
        double d = 0;
        try {
          size_t used = 0;
          d = std::stod(v, &used);
          if (used != v.size()) return "not a number: " + v;
        } catch (const std::exception&) {
          return "not a number: " + v;
        }
        if (!std::isfinite(d) || d < lo || d > hi)
          return "must be a finite number in [" + str(lo) + ", " + str(hi) + "], got " + v;
        return "";
      },
      "FINITE in [" + str(lo) + ", " + str(hi) + "]");
}

CLI::Validator byte_size() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (parse_byte_size(v)) return "";
        return "not a size: " + v +
               "; write it as bytes or with a unit, e.g. 64GB (powers of 1000), 48GiB or 48G (powers of 1024)";
      },
      "SIZE");
}

OptionUse take(std::string command) {
  OptionUse u;
  u.command = std::move(command);
  return u;
}
OptionDef option(std::string names, std::string help) {
  OptionDef d;
  d.names = std::move(names);
  d.help = std::move(help);
  return d;
}
std::string knob_help(const KnobInfo& k) {
  return fmt::format("{} (environment: {}; default {})", k.help, k.env, *k.def ? k.def : "unset");
}
OptionDef knob_option(const std::string& knob) {
  for (const KnobInfo& k : knob_table()) {
    if (k.name != knob) continue;
    if (!*k.flag) break;
    OptionDef d = option(k.flag, knob_help(k));
    d.env = k.env;
    d.knob = k.name;
    return d;
  }
  throw std::logic_error("internal: tools/options.cpp names the knob '" + knob +
                         "', which core/knobs.cpp does not have with a flag");
}
const OptionUse& OptionDef::use_in(const std::string& command) const {
  for (const OptionUse& u : uses)
    if (u.command == command) return u;
  throw std::logic_error("internal: the option " + names + " (tools/options.cpp) does not list the command '" +
                         command + "'; add take(\"" + command + "\") to its uses");
}

CLI::Option* finish_option(CLI::Option* o, const OptionDef& def, const std::string& command) {
  const OptionUse& u = def.use_in(command);
  const std::vector<std::string>& values = u.values.empty() ? def.values : u.values;
  if (!values.empty()) o->check(CLI::IsMember(values));
  if (def.check && u.row_check) o->check(*def.check);
  if (u.check) o->check(*u.check);
  if (u.env && !def.env.empty() && def.knob.empty()) o->envname(def.env);
  if (u.required) o->required();
  if (u.show_default) o->capture_default_str();
  return o;
}

namespace opt {

// The DiT commands run f64, f32, bf16 on the CPU and bf16, fp8 on the GPU; the VAE commands f32, f64 on the CPU and
// f32, bf16 on the GPU. The value set beside the option in --help is the command's own.
const OptionDef precision =
    option("--precision",
           "precision of the models the command runs (it takes the values listed with the option): DiT (generate, "
           "serve, forward, parity, bench): f64, f32 or bf16 on the CPU, bf16 (the released mixed recipe) or fp8 on "
           "the GPU; VAEs (decode, vae-parity, bench-decode): f32 or f64 on the CPU, f32 or bf16 on the GPU (the "
           "audio VAE runs f32); verify: the golden set's models; info: bytes per element of its report; bench, "
           "bench-decode: one or more. Default: as shown, else bf16 on the GPU and f32 on the CPU (verify: f64; f32 "
           "for pipeline sets)")
        .with_env("H3_PRECISION")
        .with_values({"f64", "f32", "bf16", "fp8"})
        .taken_by({take("plan").only({"bf16", "fp8"}).no_env().shows_default(), take("generate"), take("serve"),
                   take("serve-worker"), take("verify"), take("forward").no_env().shows_default(),
                   take("parity").no_env().shows_default(),
                   take("vae-parity").only({"f32", "f64", "bf16"}).shows_default(),
                   take("decode").only({"f32", "f64", "bf16"}).shows_default(),
                   take("info").only({"f64", "f32", "bf16"}).no_env().shows_default(),
                   take("bench").only({"bf16", "fp8"}).no_env().shows_default(),
                   take("bench-decode").only({"bf16", "f32"}).no_env().shows_default()});

const OptionDef vae_precision =
    option("--vae-precision", "VAE decoders: bf16 (GPU default) or f32 on the GPU; f32 (default) or f64 on the CPU")
        .with_env("H3_VAE_PRECISION")
        .with_values({"f64", "f32", "bf16"})
        .taken_by({take("plan").only({"bf16", "f32"}).no_env().shows_default(), take("generate"), take("serve"),
                   take("serve-worker")});

const OptionDef text_precision =
    option("--text-precision",
           "text tower (and vision tower): bf16 (GPU default) or f32 on the GPU; f32 (default) or f64 on the CPU")
        .with_env("H3_TEXT_PRECISION")
        .with_values({"f64", "f32", "bf16"})
        .taken_by({take("plan").only({"bf16", "f32"}).no_env().shows_default(), take("generate"), take("serve"),
                   take("serve-worker")});

const OptionDef text_device =
    option("--text-device", "where the text tower runs: cuda (default with --device cuda) or cpu")
        .with_env("H3_TEXT_DEVICE")
        .with_values({"cpu", "cuda"})
        .taken_by({take("generate"), take("serve"), take("serve-worker")});

const OptionDef memory_plan =
    option("--memory-plan",
           "GPU: phases (load and free each model with its phase), resident (load all once) or auto (keep every "
           "model loaded that fits beside the largest request)")
        .with_env("H3_MEMORY_PLAN")
        .with_values({"phases", "resident", "auto"})
        .taken_by({take("plan").no_env().shows_default(), take("generate").shows_default(),
                   take("serve").shows_default(), take("serve-worker").shows_default()});

const OptionDef mode =
    option("--mode",
           "with --ranks N: how the DiT is spread over the ranks, ulysses, ulysses-ag, tensor or hybrid (info: the "
           "per-rank memory of this mode)")
        .with_env("H3_MODE")
        .with_values({"ulysses", "ulysses-ag", "tensor", "hybrid"})
        .taken_by({take("plan").no_env().shows_default(), take("generate").shows_default(),
                   take("forward").shows_default(), take("parity").shows_default(), take("serve").shows_default(),
                   take("serve-worker").shows_default(), take("verify").no_env(),
                   take("info").no_env().shows_default()});

// verify and info took any --tp (and verify any --chunks) before the table; they still do (the plan refuses a
// degree that does not divide the ranks).
const OptionDef tp =
    option("--tp", "hybrid: tensor-parallel degree (divides the ranks)")
        .with_check(CLI::Range(1, 4096))
        .taken_by({take("plan").no_env(), take("generate"), take("forward"), take("parity"), take("serve"),
                   take("serve-worker"), take("verify").unchecked(), take("info").unchecked()});

const OptionDef chunks =
    option("--chunks", "pieces each exchange is issued in")
        .with_check(CLI::Range(1, 64))
        .taken_by({take("plan").no_env(), take("generate"), take("forward"), take("parity").shows_default(),
                   take("serve"), take("serve-worker"), take("verify").unchecked()});

const OptionDef encoder_ranks =
    option("--encoder-ranks", "keep the text tower on K dedicated ranks (0: rank 0 encodes, then frees it)")
        .with_env("H3_ENCODER_RANKS")
        .with_check(CLI::Range(0, 4096))
        .taken_by({take("generate"), take("serve").no_env(), take("serve-worker").no_env()});

const OptionDef model_dir = option("-m,--model-dir,--model",
                                   "released/diffusers folder supplying every component (transformer/, vae/, "
                                   "audio_vae/, text_encoder/, tokenizer/)")
                                .with_env("H3_MODEL_DIR")
                                .taken_by({take("generate"), take("serve"), take("serve-worker")});

// forward and bench run the DiT alone: their -m is one checkpoint, not a folder of every component.
const OptionDef dit_checkpoint =
    option("-m,--model", "DiT checkpoint (file, folder or procedural:NAME)")
        .with_env("H3_MODEL")
        .taken_by({take("forward").shows_default(), take("bench").no_env().shows_default()});

const OptionDef dit =
    option("--dit", "DiT checkpoint (file, folder or procedural:NAME)")
        .with_env("H3_DIT")
        .taken_by({take("plan").no_env(), take("generate").no_env(), take("serve"), take("serve-worker")});

// --video-vae and --audio-vae: the same row for each VAE ("video", "audio").
OptionDef vae_option(const std::string& kind, const std::string& env) {
  return option("--" + kind + "-vae",
                kind +
                    " VAE: safetensors file, diffusers folder (one file or index + shards), procedural:mini or "
                    "procedural:full")
      .with_env(env)
      .taken_by({take("plan").no_env(), take("generate").no_env(), take("serve"), take("serve-worker"),
                 take("decode").shows_default()});
}

const OptionDef video_vae = vae_option("video", "H3_VIDEO_VAE");
const OptionDef audio_vae = vae_option("audio", "H3_AUDIO_VAE");

const OptionDef text_encoder =
    option("--text-encoder", "Qwen3-VL text tower (file or folder)")
        .with_env("H3_TEXT_ENCODER")
        .taken_by({take("plan").no_env(), take("generate").no_env(), take("serve"), take("serve-worker")});

const OptionDef tokenizer =
    option("--tokenizer",
           "tokenizer.json (or its folder); verify FILE.json: the tokenizer that FILE's "
           "tokenizer cases are checked against")
        .with_env("H3_TOKENIZER")
        .taken_by({take("plan").no_env(), take("generate"), take("serve"), take("serve-worker"), take("verify")});

const OptionDef lora =
    option("--lora",
           "LoRA merged into the DiT on load, FILE[:STRENGTH] (repeatable, in order; convert: baked into the file; "
           "verify: the golden outputs must have been made with the same LoRA)")
        .with_env("H3_LORA")
        .taken_by(
            {take("generate"), take("forward"), take("parity"), take("verify").no_env(), take("convert").no_env()});

const OptionDef weights =
    option("--weights", "DiT weights (file, folder or procedural:NAME) instead of the golden file's own")
        .taken_by({take("verify"), take("parity")});

const OptionDef seed =
    option("-s,--seed",
           "generate: the noise seed (default: random, printed and stored in the file); forward: "
           "the seed of the random inputs; bench-decode: the seed of the procedural weights")
        .taken_by({take("generate"), take("forward").shows_default(), take("bench-decode").shows_default()});

const OptionDef width = option("-W,--width", "pixels, a multiple of 32 (generate: with --height)")
                            .taken_by({take("generate"), take("forward").shows_default()});

const OptionDef height = option("-H,--height", "pixels, a multiple of 32 (generate: with --width)")
                             .taken_by({take("generate"), take("forward").shows_default()});

const OptionDef frames =
    option("--frames", "pixel frames at 24 fps, snapped up to 17n+5 (generate: 124..345, default 124)")
        .taken_by({take("plan").shows_default(), take("generate"), take("forward").shows_default(),
                   take("bench-decode").shows_default().checked(CLI::Range(22, 100000))});

const OptionDef reps = option("--reps",
                              "timed forwards, their median the time (steady state: plans, algorithms and tables "
                              "cached): bench times N after one warm-up; forward runs N in all, the first a warm-up "
                              "when N > 1")
                           .with_check(CLI::Range(1, 100))
                           .taken_by({take("bench").shows_default(), take("forward")});

const OptionDef res = option("--res",
                             "one or more of 480p (832x480) and 768p (1344x768), 124 frames (bench-decode: --frames) "
                             "and, in bench, 64 or 120 text rows")
                          .with_values({"480p", "768p"})
                          .taken_by({take("bench").shows_default(), take("bench-decode").shows_default()});

const OptionDef seq = option("--seq",
                             "packed sequence length: info: the one of the activation estimate (768p: 37830); "
                             "bench-comm: the lengths timed")
                          .taken_by({take("info").shows_default(), take("bench-comm").shows_default()});

const OptionDef profile = option("--profile",
                                 "also time the regions of one more real run on the device and print the seconds "
                                 "per region (bench: a forward's own spans, not isolated; bench-decode: a whole "
                                 "decode per resolution, device events)")
                              .taken_by({take("bench"), take("bench-decode")});

const OptionDef no_audio = option("--no-audio",
                                  "leave the audio out (decode: ignore audio latents, a video-only MP4; "
                                  "bench-decode: skip the audio decode)")
                               .with_env("H3_NO_AUDIO")
                               .taken_by({take("decode"), take("bench-decode").no_env()});

const OptionDef output =
    option("-o,--output",
           "the file to write: generate, decode: the MP4 (decode writes it atomically: nothing "
           "is left on failure); convert: the .safetensors file")
        .taken_by({take("generate").shows_default(), take("decode").needed(), take("convert").needed()});

const OptionDef json =
    option("--json",
           "also write the results as JSON to FILE (generate: the run's record: geometry, "
           "precisions, timings per phase, time to MP4, loads, peak memory per phase, memory plan)")
        .taken_by({take("generate"), take("bench"), take("bench-decode"), take("bench-comm"), take("plan")});

const OptionDef steps = option("--steps", "schedule grid points (N-1 DiT calls)")
                            .with_env("H3_STEPS")
                            .taken_by({take("generate").shows_default(), take("plan").no_env().shows_default()});

const OptionDef runner = option("--runner", "generator (the models) or fake (no models; the server's own tests)")
                             .with_env("H3_RUNNER")
                             .with_values({"generator", "fake"})
                             .taken_by({take("serve").shows_default(), take("serve-worker").shows_default()});

const OptionDef write_latents = option("--write-latents", "keep <id>.mp4.latents.safetensors beside each video")
                                    .with_env("H3_WRITE_LATENTS")
                                    .taken_by({take("serve"), take("serve-worker")});

const OptionDef fake_step_ms = option("--fake-step-ms", "fake runner: milliseconds per denoising step")
                                   .with_env("H3_FAKE_STEP_MS")
                                   .with_check(CLI::Range(0, 600000))
                                   .taken_by({take("serve"), take("serve-worker")});

const OptionDef fake_load_ms = option("--fake-load-ms", "fake runner: milliseconds to 'load models'")
                                   .with_env("H3_FAKE_LOAD_MS")
                                   .with_check(CLI::Range(0, 600000))
                                   .taken_by({take("serve"), take("serve-worker")});

const OptionDef preview_every =
    option("--preview-every",
           "a preview of the video every K DiT calls while denoising (0: none): the prediction's first frames decoded "
           "by the video VAE, a picture at most 480 pixels wide (generate: with --preview-dir; serve: preview events "
           "and the job's latest at content?variant=preview). 10: an estimated 1.4 % of a 768p denoise (docs/notes.md)")
        .with_env("H3_PREVIEW_EVERY")
        .with_check(CLI::Range(0, 1000))
        .taken_by({take("generate").shows_default(), take("serve").shows_default()});
const OptionDef host_memory =
    option("--host-memory",
           "host memory each rank may use, e.g. 64GB (generate, serve: default each rank's share of what the host has "
           "available at start; plan: default not limited). Layers that do not fit the GPU wait in page-locked "
           "copies while those fit with 8 GiB to spare; else they stream from the memory-mapped checkpoint, which "
           "must then hold the weights as the GPU does (an FP8 file for --precision fp8, bf16 for bf16)")
        .with_env("H3_HOST_MEMORY")
        .with_check(byte_size())
        .taken_by({take("plan").no_env(), take("generate"), take("serve"), take("serve-worker")});

const OptionDef max_device_memory =
    knob_option("max_device_memory")
        .taken_by({take("generate"), take("serve"), take("bench"), take("decode"), take("bench-decode")});

}  // namespace opt

const std::vector<const OptionDef*>& option_table() {
  using namespace opt;
  static const std::vector<const OptionDef*> t = {
      &precision,  &vae_precision, &text_precision, &text_device,  &memory_plan,    &mode,
      &tp,         &chunks,        &encoder_ranks,  &model_dir,    &dit_checkpoint, &dit,
      &video_vae,  &audio_vae,     &text_encoder,   &tokenizer,    &lora,           &weights,
      &seed,       &width,         &height,         &frames,       &reps,           &res,
      &seq,        &profile,       &no_audio,       &output,       &json,           &max_device_memory,
      &steps,      &runner,        &write_latents,  &fake_step_ms, &fake_load_ms,   &preview_every,
      &host_memory};
  return t;
}

void add_dist(CLI::App* cmd, std::string& mode, int& tp, int& chunks) {
  add(cmd, opt::mode, mode);
  add(cmd, opt::tp, tp);
  add(cmd, opt::chunks, chunks);
}

void add_component_paths(CLI::App* cmd, ModelPaths& paths) {
  add(cmd, opt::dit, paths.dit);
  add(cmd, opt::video_vae, paths.video_vae);
  add(cmd, opt::audio_vae, paths.audio_vae);
  add(cmd, opt::text_encoder, paths.text_encoder);
  add(cmd, opt::tokenizer, paths.tokenizer);
}

}  // namespace h3::cli

// h3 generate: prompt -> MP4 (pipeline/generator.h). With no model paths every component is procedural (mini),
// so it runs with no download; the output then says plainly that the pictures are meaningless.
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "backend/backend.h"
#include "commands.h"
#include "core/error.h"
#include "core/files.h"
#include "core/hash.h"
#include "core/parallel.h"
#include "core/signals.h"
#include "distributed/comm.h"
#include "io/procedural.h"
#include "io/safetensors.h"
#include "media/mp4_writer.h"
#include "model/dit/lora.h"
#include "pipeline/generator.h"
#include "pipeline/preview.h"
#include "pipeline/run_record.h"

namespace h3::cli {

namespace {

uint64_t tensor_hash(const Tensor& t) {
  return fnv1a(t.raw(), t.nbytes());
}

Tensor pick_tensor(const SafeTensors& f, std::initializer_list<const char*> names, const char* what) {
  for (const char* n : names)
    if (f.has(n)) return f.get(n).to(DType::f32);
  std::string list;
  for (const char* n : names) list += (list.empty() ? "" : ", ") + std::string(n);
  fail("{}: no {} tensor (looked for {})", f.path(), what, list);
}

constexpr int kMaxCount = 8;  // as a server job's `n`

// --seed: an integer 0 .. 2^64 - 1, refused (not wrapped, not taken as "random") otherwise.
uint64_t parse_seed(const std::string& s) {
  const bool digits = !s.empty() && s.size() <= 20 && s.find_first_not_of("0123456789") == std::string::npos;
  const bool fits = digits && (s.size() < 20 || s <= "18446744073709551615");
  H3_CHECK(fits, "--seed {}: give an integer 0 .. 18446744073709551615 (or leave it out for a random seed)",
           s.substr(0, 40));
  return std::stoull(s);
}

double denoise_seconds(const GenerateResult& r) {
  for (const auto& t : r.timings)
    if (t.phase == "denoise") return t.seconds;
  return 0;
}

std::string eta_str(double s) {
  if (s < 0) return "--:--";
  const int64_t t = static_cast<int64_t>(s + 0.5);
  return t >= 3600 ? fmt::format("{}:{:02}:{:02}", t / 3600, t / 60 % 60, t % 60)
                   : fmt::format("{}:{:02}", t / 60, t % 60);
}

// Where the time went, on one line: each phase's seconds and share of the total, and the denoise's seconds per
// DiT call with the calls' median after the first and the first (its GEMM tuning) ("timings: load 0.52 s (12%),
// encode 0.31 s (7%), denoise 2.84 s (66%, 1.42 s per DiT call; median 1.40 s, first 1.44 s), ...").
std::string timing_summary(const GenerateResult& res) {
  const std::vector<PhaseTiming>& timings = res.timings;
  const int model_calls = res.request.model_calls;
  double total = 0;
  for (const auto& t : timings) total += t.seconds;
  std::string line = "timings:";
  for (const auto& t : timings) {
    const double share = total > 0 ? 100.0 * t.seconds / total : 0.0;
    line += fmt::format(" {} {:.2f} s ({:.0f}%", t.phase, t.seconds, share);
    if (t.phase == "denoise" && model_calls > 0) {
      line += fmt::format(", {:.3g} s per DiT call", t.seconds / model_calls);
      if (res.call_seconds.size() > 1)
        line += fmt::format("; median {:.3f} s, first {:.3f} s", res.median_call_seconds(), res.call_seconds[0]);
    }
    line += "),";
  }
  return line + fmt::format(" total {:.2f} s", total);
}

struct GenerateOpts {
  GenerateRequest req;
  std::string prompt_file, out = "h3-out.mp4";
  int64_t width = 0, height = 0, frames = 0;
  double seconds = 0;
  std::string seed;
  CLI::Option *width_opt = nullptr, *height_opt = nullptr, *frames_opt = nullptr, *seconds_opt = nullptr;
  std::string precision, vae_precision, text_precision, text_device, memory = "phases", mode = "ulysses";
  std::string host_memory;
  std::string json_out;
  int tp = 1, chunks = 1, encoder_ranks = 0;
  std::string encoder_at = "last";
  ModelPaths paths;
  std::string embeddings, noise;
  bool latents = false;
  int count = 1;            // videos from one load, seeds seed, seed + 1, ...
  std::string preview_dir;  // previews while denoising (PNG), "" = none
  int preview_every = kDefaultPreviewEvery;
  // fl2va keyframes and ref2va references (kept in command-line order through the parse order).
  std::string first, last;
  std::vector<std::string> loras;
  std::vector<std::string> ref_image, ref_video, ref_audio;
  CLI::Option *ref_image_opt = nullptr, *ref_video_opt = nullptr, *ref_audio_opt = nullptr;
};

// generate's own options; those other commands take too are rows of tools/options.cpp (opt::).
OptionDef own(std::string names, std::string help, OptionUse use = take("generate")) {
  return option(std::move(names), std::move(help)).taken_by({std::move(use)});
}
const OptionUse kShown = take("generate").shows_default();
const OptionDef kPrompt = own("-p,--prompt", "what to generate (text)").with_env("H3_PROMPT");
const OptionDef kPromptFile = own("-f,--prompt-file", "read the prompt from a UTF-8 file");
const OptionDef kAspect = own("--aspect", "W:H when no --width/--height (1:4 .. 4:1; short edge 768)", kShown);
const OptionDef kSeconds =
    own("--seconds", "duration instead of --frames (5..15 s)").with_check(finite_range(-1e300, 1e300));
const OptionDef kShift = own("--shift", "video schedule shift", kShown).with_check(finite_range(-1e300, 1e300));
const OptionDef kAudioShift =
    own("--audio-shift", "audio schedule shift", kShown).with_check(finite_range(-1e300, 1e300));
const OptionDef kFirst = own("--first", "fl2va: first keyframe image (PNG/JPEG/WebP); sets the aspect");
const OptionDef kLast = own("--last", "fl2va: last keyframe image (cover-scaled and centre-cropped)");
const OptionDef kRefImage = own("--ref-image", "ref2va: reference image (repeatable)");
const OptionDef kRefVideo = own("--ref-video", "ref2va: reference video, with its soundtrack if any (repeatable)");
const OptionDef kRefAudio = own("--ref-audio", "ref2va: reference audio (repeatable)");
const OptionDef kEmbeddings = own("--embeddings", "precomputed prompt embeddings (safetensors: prompt_embeds)");
const OptionDef kNoise = own("--noise", "precomputed noise (safetensors: video_noise, audio_noise_rows)");
const OptionDef kEncoderAt = own("--encoder-at",
                                 "which world ranks are the K encoder ranks: last (default) or first (the first "
                                 "host's ranks when K is its rank count; rank K then writes the output)",
                                 kShown)
                                 .with_env("H3_ENCODER_AT")
                                 .with_values({"first", "last"});
const OptionDef kLatents = own("--latents", "also write OUT.latents.safetensors (final latents)");
const OptionDef kCount = own("--count",
                             "videos made from one load of the models, one after the other: seeds SEED, SEED+1, ...; "
                             "with N > 1 the outputs are OUT-0.mp4 .. OUT-(N-1).mp4 (and so --latents, --json)",
                             kShown)
                             .with_env("H3_COUNT")
                             .with_check(CLI::Range(1, kMaxCount));
const OptionDef kPreviewDir =
    own("--preview-dir",
        "write a preview PNG every --preview-every DiT calls while denoising: DIR/<output name>-step<NNN>.png "
        "(created if missing)")
        .with_env("H3_PREVIEW_DIR");

// The request as the options give it (resolve() checks it).
GenerateRequest request_from(const GenerateOpts& o, const CLI::App& cmd) {
  GenerateRequest req = o.req;
  if (!o.prompt_file.empty()) {
    H3_CHECK(req.prompt.empty(), "give --prompt or --prompt-file, not both");
    req.prompt = read_text_file_checked(o.prompt_file, "--prompt-file", 1 << 20);
    while (!req.prompt.empty() && (req.prompt.back() == '\n' || req.prompt.back() == '\r')) req.prompt.pop_back();
  }
  if (req.prompt.empty() && !o.embeddings.empty()) req.prompt = "(precomputed embeddings " + o.embeddings + ")";
  // Every value given is passed on, 0 included, so resolve() refuses it with the allowed range.
  if (o.width_opt->count()) req.width = o.width;
  if (o.height_opt->count()) req.height = o.height;
  if (o.frames_opt->count()) req.frames = o.frames;
  if (o.seconds_opt->count()) req.seconds = o.seconds;
  if (!o.seed.empty()) req.seed = parse_seed(o.seed);
  for (const auto& spec : o.loras) {
    const auto [file, strength] = parse_lora_spec(spec);
    req.loras.push_back({file, strength});
  }
  req.first_image = o.first;
  req.last_image = o.last;
  // References in the order given: the i-th occurrence of an option is its i-th value.
  size_t next[3] = {0, 0, 0};
  for (const CLI::Option* opt : cmd.parse_order()) {
    const int k = opt == o.ref_image_opt ? 0 : opt == o.ref_video_opt ? 1 : opt == o.ref_audio_opt ? 2 : -1;
    if (k < 0) continue;
    const std::vector<std::string>& vals = k == 0 ? o.ref_image : k == 1 ? o.ref_video : o.ref_audio;
    H3_CHECK(next[k] < vals.size(), "internal: reference option order mismatch");
    req.references.push_back({k == 0 ? "image" : k == 1 ? "video" : "audio", vals[next[k]++]});
  }
  H3_CHECK(req.references.size() == o.ref_image.size() + o.ref_video.size() + o.ref_audio.size(),
           "give each --ref-image/--ref-video/--ref-audio one file");
  return req;
}

// Video k of --count N: the path with "-k" before its extension (N = 1: the path itself).
std::string nth_path(const std::string& path, int k, int count) {
  if (count <= 1 || path.empty()) return path;
  std::filesystem::path p(path);
  return (p.parent_path() / (p.stem().string() + "-" + std::to_string(k) + p.extension().string())).string();
}

// The preview of video `out` after `step` DiT calls.
std::string preview_path(const GenerateOpts& o, const std::string& out, int step) {
  return (std::filesystem::path(o.preview_dir) /
          fmt::format("{}-step{:03}.png", std::filesystem::path(out).stem().string(), step))
      .string();
}

// The files the run will write, checked before any model is loaded.
void check_outputs(const GenerateOpts& o) {
  H3_CHECK(!o.out.empty(), "-o needs a path");
  H3_CHECK(!std::filesystem::is_directory(o.out), "-o {} is a folder; give a file name such as out.mp4", o.out);
  H3_CHECK(o.count == 1 || o.noise.empty(),
           "--count {} with --noise: every video would start from the same noise and be the same; give one", o.count);
  for (int k = 0; k < o.count; ++k) {
    const std::string out = nth_path(o.out, k, o.count);
    check_output_file(out, "-o");
    if (o.latents)
      check_output_file(std::filesystem::path(out).replace_extension(".latents.safetensors").string(), "--latents");
    if (!o.json_out.empty()) check_output_file(nth_path(o.json_out, k, o.count), "--json");
  }
  if (!o.preview_dir.empty()) {
    H3_CHECK(o.preview_every > 0, "--preview-dir {} with --preview-every 0 would write no preview; give K > 0",
             o.preview_dir);
    std::error_code ec;
    std::filesystem::create_directories(o.preview_dir, ec);
    H3_CHECK(std::filesystem::is_directory(o.preview_dir), "--preview-dir {}: cannot create the folder{}",
             o.preview_dir, ec ? ": " + ec.message() : std::string());
    check_output_file(preview_path(o, o.out, o.preview_every), "--preview-dir");
  }
}

PrecomputedInputs read_precomputed(const GenerateOpts& o) {
  PrecomputedInputs pre;
  if (!o.embeddings.empty())
    pre.prompt_embeds =
        pick_tensor(SafeTensors::open(o.embeddings), {"prompt_embeds", "input.prompt_embeds"}, "prompt embeddings");
  if (!o.noise.empty()) {
    const SafeTensors f = SafeTensors::open(o.noise);
    pre.video_noise = pick_tensor(f, {"video_noise", "input.video_noise"}, "video noise");
    pre.audio_noise_rows = pick_tensor(f, {"audio_noise_rows", "input.audio_noise_rows"}, "audio noise rows");
  }
  return pre;
}

// Where and how the models run: the precisions, the text tower's device, the memory plan and the ranks.
GenerateOptions generate_options(const GenerateOpts& o, const GlobalContext& ctx, Comm& w) {
  const Device device = ctx.compute_device();
  GenerateOptions go = generate_options_from(
      device, {o.precision, o.vae_precision, o.text_precision, o.text_device, o.memory, o.host_memory});
  go.max_device_bytes = ctx.gpu.max_device_bytes;  // --max-device-memory: the plan starts from it
  go.dist = DistOptions{dist_mode_from_name(o.mode), o.tp, o.chunks, device == Device::cuda ? gpu_bus_id() : "",
                        ctx.transport};
  go.encoder_ranks = o.encoder_ranks;
  go.comm = &w;
  go.write_latents = o.latents;
  check_generate_options(go);
  return go;
}

// The run with a progress bar (a terminal) or progress lines (a log); nullopt when Ctrl-C cancelled it.
std::optional<GenerateResult> run_with_progress(Generator& gen, const ResolvedRequest& resolved, const std::string& out,
                                                const PrecomputedInputs& pre, bool root, const RunHooks& hooks) {
  const bool tty = isatty(fileno(stderr));
  std::string last_phase;
  auto progress = [&](const GenerateProgress& p) {
    if (tty) {
      const int width = 30, fill = static_cast<int>(p.percent / 100.0 * width + 0.5);
      std::fprintf(stderr, "\r[%s%s] %5.1f%% %-12s %d/%d ETA %s   ", std::string(fill, '#').c_str(),
                   std::string(width - fill, '.').c_str(), p.percent, p.phase.c_str(), p.step, p.steps,
                   eta_str(p.eta_s).c_str());
      if (p.phase == "done") std::fprintf(stderr, "\n");
    } else if (p.phase == "denoise" ? p.step > 0 : p.phase != last_phase) {
      std::fprintf(stderr, "progress: %s %d/%d %.1f%% eta %s\n", p.phase.c_str(), p.step, p.steps, p.percent,
                   eta_str(p.eta_s).c_str());
    }
    last_phase = p.phase;
    std::fflush(stderr);
  };
  // The first Ctrl-C asks for a clean stop at the next check (every phase has one: before and after encoding,
  // each denoising step, around each decode, before writing); a second one stops at once.
  const SigintCancels sigint("\ncancelling at the next step; press Ctrl-C again to stop at once\n");
  try {
    return gen.run(resolved, out, progress, sigint.flag(), &pre, &hooks);
  } catch (const Cancelled& e) {
    if (root) std::fprintf(stderr, "\ncancelled: %s; nothing was written\n", e.what());
    return std::nullopt;
  }
}

// Rank 0's report of a finished run: times, loads, peak memory, latents, what was written.
void print_result(const GenerateResult& res, const Generator& gen) {
  std::printf("%s; time to MP4 (loads excluded) %.2f s\n", timing_summary(res).c_str(), res.time_to_mp4());
  for (const auto& l : res.loads)
    std::printf("load %-9s %7.2f s%s\n", l.model.c_str(), l.seconds,
                l.file_bytes > 0
                    ? fmt::format(", {:.2f} GB from file at {:.2f} GB/s", l.file_bytes / 1e9, l.gb_per_s()).c_str()
                    : " (procedural: generated)");
  if (!res.peaks.empty()) {
    std::printf("peak GPU memory (rank 0):");
    for (const auto& p : res.peaks) std::printf(" %s %.1f GiB,", p.phase.c_str(), p.bytes / 1073741824.0);
    std::printf(" (plan: peak %.1f GiB)\n", res.memory_plan.peak() / 1073741824.0);
  }
  if (!res.windows.empty()) {
    std::printf("peak host memory (RSS, rank 0):");
    for (const auto& w : res.windows)
      std::printf(" %s %.1f GiB,", w.phase.c_str(), w.host_rss_peak_bytes / 1073741824.0);
    std::printf("\n");
  }
  std::printf("prompt tokens %" PRId64 " (vision rows %" PRId64 " in %" PRId64
              " blocks), latents: video %s hash %016" PRIx64 ", audio rows %s hash %016" PRIx64 "\n",
              res.prompt_tokens, res.vision_rows, res.vision_blocks, shape_str(res.video_latents.shape()).c_str(),
              tensor_hash(res.video_latents), shape_str(res.audio_latent_rows.shape()).c_str(),
              tensor_hash(res.audio_latent_rows));
  if (res.wrote_mp4) {
    std::printf("wrote %s (%" PRId64 "x%" PRId64 ", %" PRId64 " frames at 24 fps, stereo %d Hz)\n",
                res.out_path.c_str(), res.request.width, res.request.height, res.request.frames, gen.sample_rate());
  } else {
    std::printf("wrote %s (latents only: this build has no MP4 writer yet)\n", res.out_path.c_str());
  }
  if (gen.procedural())
    std::printf("reminder: procedural models -> meaningless pictures; pass --model DIR for real output\n");
  if (!res.request.loras.empty())
    std::printf("LoRA digest %016" PRIx64 " (every denoise rank agreed)\n", res.lora_digest);
  for (const auto& warning : res.warnings) std::printf("warning: %s\n", warning.c_str());
}

// --json: the run's record (pipeline/run_record.h).
void write_record(const std::string& path, const GenerateResult& res, const GenerateOptions& go, Device device,
                  int ranks) {
  RecordContext rc;
  rc.device_name = device == Device::cuda ? gpu_description() : "CPU";
  rc.ranks = ranks;
  rc.video_latents_hash = tensor_hash(res.video_latents);
  rc.audio_latents_hash = tensor_hash(res.audio_latent_rows);
  std::ofstream js(path);
  H3_CHECK(js.good(), "--json {}: cannot write the file", path);
  js << generate_record(res, go, rc).dump(2) << "\n";
  H3_CHECK(js.good(), "--json {}: write failed", path);
  std::printf("wrote the run record %s\n", path.c_str());
}

int run_generate(const GenerateOpts& o, const CLI::App& cmd, const GlobalContext& ctx) {
  Comm& world_comm = world();
  // --encoder-at first: the group is the world rotated so that world ranks [0, K) are its last K ranks (the
  // generator's encoder ranks) and world rank K its rank 0.
  std::unique_ptr<Comm> rotated;
  const int n_world = world_comm.size(), K = o.encoder_ranks;
  if (o.encoder_at == "first" && K > 0 && K < n_world)
    rotated = world_comm.split(0, (world_comm.rank() + n_world - K) % n_world);
  Comm& w = rotated ? *rotated : world_comm;
  const bool root = w.rank() == 0;

  // Everything about the request is checked before any model is loaded.
  const ResolvedRequest resolved = resolve(request_from(o, cmd), Generator::limits_for(o.paths));
  check_outputs(o);
  const PrecomputedInputs pre = read_precomputed(o);
  const GenerateOptions go = generate_options(o, ctx, w);
  const Device device = go.device;
  if (root) {
    std::printf("h3 generate: %d rank(s), %d threads per rank, %s: DiT %s, VAEs %s, text tower %s on the %s\n",
                w.size(), cpu_threads(), device == Device::cuda ? gpu_description().c_str() : "CPU",
                precision_name(go.precision).data(), precision_name(go.vae_precision).data(),
                precision_name(go.text_precision).data(), go.text_device == Device::cuda ? "GPU" : "CPU");
    std::printf("request: %s\n", resolved.to_json().dump(2).c_str());
    std::fflush(stdout);
  }
  // On the GPU the memory plan is checked before anything is loaded: a request that cannot fit is refused here,
  // saying what would fit.
  if (device == Device::cuda) {
    const MemoryPlan plan = Generator::memory_plan_for(o.paths, go, resolved);
    if (root) {
      for (const auto& line : plan.describe()) std::printf("%s\n", line.c_str());
      std::fflush(stdout);
    }
    H3_CHECK(plan.fits, "this request does not fit the GPU: {}", plan.problem);
  }
  Generator gen(o.paths, go);
  if (root) {
    for (const auto& line : gen.describe()) std::printf("  %s\n", line.c_str());
    if (gen.procedural()) std::printf("%s\n", procedural_models_notice().c_str());
    std::fflush(stdout);
  }

  // --count N: the same request with seeds seed, seed + 1, ... (wrapping at 2^64), the models loaded once.
  for (int k = 0; k < o.count; ++k) {
    ResolvedRequest req = resolved;
    req.seed = resolved.seed + static_cast<uint64_t>(k);
    const std::string out = nth_path(o.out, k, o.count);
    if (root && o.count > 1) {
      std::printf("video %d of %d: seed %" PRIu64 " -> %s\n", k + 1, o.count, req.seed, out.c_str());
      std::fflush(stdout);
    }
    RunHooks hooks;
    if (!o.preview_dir.empty()) {
      hooks.preview_every = o.preview_every;
      hooks.preview = [&](const PreviewPicture& p) {
        const std::string path = preview_path(o, out, p.step);
        write_png(path, p.picture);
        std::fprintf(stderr, "%spreview after %d/%d DiT calls (frame %" PRId64 "): %s\n",
                     isatty(fileno(stderr)) ? "\n" : "", p.step, p.steps, p.frame, path.c_str());
      };
    }
    const std::optional<GenerateResult> res = run_with_progress(gen, req, out, pre, root, hooks);
    if (!res) return 130;
    if (!root) continue;
    print_result(*res, gen);
    if (res->previews > 0)
      std::printf("previews: %d in %.2f s (%.1f%% of the denoise)\n", res->previews, res->preview_seconds,
                  100.0 * res->preview_seconds / std::max(1e-9, denoise_seconds(*res)));
    if (!o.json_out.empty()) write_record(nth_path(o.json_out, k, o.count), *res, go, device, w.size());
  }
  if (root) std::printf("OK\n");
  return 0;
}

}  // namespace

Runner add_generate(CLI::App& app) {
  auto* cmd = app.add_subcommand("generate", "prompt -> MP4 (video + soundtrack); procedural mini models by default");
  auto o = std::make_shared<GenerateOpts>();
  cmd->option_defaults()->group("Request");
  add(cmd, kPrompt, o->req.prompt);
  add(cmd, kPromptFile, o->prompt_file);
  o->width_opt = add(cmd, opt::width, o->width);
  o->height_opt = add(cmd, opt::height, o->height);
  add(cmd, kAspect, o->req.aspect);
  o->frames_opt = add(cmd, opt::frames, o->frames);
  o->seconds_opt = add(cmd, kSeconds, o->seconds);
  add(cmd, opt::steps, o->req.steps);
  add(cmd, opt::seed, o->seed);
  add(cmd, kShift, o->req.shift);
  add(cmd, kAudioShift, o->req.audio_shift);
  add(cmd, kFirst, o->first);
  add(cmd, kLast, o->last);
  o->ref_image_opt = add(cmd, kRefImage, o->ref_image)->allow_extra_args(false);
  o->ref_video_opt = add(cmd, kRefVideo, o->ref_video)->allow_extra_args(false);
  o->ref_audio_opt = add(cmd, kRefAudio, o->ref_audio)->allow_extra_args(false);
  add(cmd, kEmbeddings, o->embeddings);
  add(cmd, kNoise, o->noise);
  cmd->option_defaults()->group("Models");
  add(cmd, opt::model_dir, o->paths.model_dir);
  add_component_paths(cmd, o->paths);
  add(cmd, opt::lora, o->loras);
  cmd->option_defaults()->group("Placement");
  add(cmd, opt::precision, o->precision);
  add(cmd, opt::vae_precision, o->vae_precision);
  add(cmd, opt::text_precision, o->text_precision);
  add(cmd, opt::text_device, o->text_device);
  add(cmd, opt::memory_plan, o->memory);
  add(cmd, opt::host_memory, o->host_memory);
  add_dist(cmd, o->mode, o->tp, o->chunks);
  add(cmd, opt::encoder_ranks, o->encoder_ranks);
  add(cmd, kEncoderAt, o->encoder_at);
  cmd->option_defaults()->group("Output");
  add(cmd, opt::output, o->out);
  add(cmd, opt::json, o->json_out);
  add(cmd, kLatents, o->latents);
  add(cmd, kCount, o->count);
  add(cmd, kPreviewDir, o->preview_dir);
  add(cmd, opt::preview_every, o->preview_every);
  return [o, cmd](const GlobalContext& ctx) { return run_generate(*o, *cmd, ctx); };
}

}  // namespace h3::cli

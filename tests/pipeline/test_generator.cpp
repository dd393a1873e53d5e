// Prompt to MP4 (pipeline/generator.h, pipeline/sampling.h): request checks, the t2va chain against the
// whole-chain golden set, the procedural components, cancellation, and `h3 generate` end to end on 1, 2 and 3
// ranks.
#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "core/compare.h"
#include "core/json_limits.h"
#include "io/procedural.h"
#include "io/safetensors.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/tokenizer.h"
#include "model/vae/procedural.h"
#include "pipeline/components.h"
#include "pipeline/generator.h"
#include "pipeline/phases.h"
#include "support/cli_run.h"
#include "support/error_of.h"
#include "support/golden.h"
#include "support/scratch_dir.h"
#include "verify/pipeline.h"

namespace {

using h3::GenerateRequest;
using json = nlohmann::json;

using h3::test::error_of;

GenerateRequest good_request() {
  GenerateRequest r;
  r.prompt = "a red kite over a windy beach, waves and gulls";
  r.seed = 7;
  return r;
}

}  // namespace

TEST(GenerateRequest, DefaultsResolveToTheReleasedGeometry) {
  const h3::ResolvedRequest r = h3::resolve(good_request());
  EXPECT_EQ(r.width, 1344);
  EXPECT_EQ(r.height, 768);
  EXPECT_EQ(r.frames, 124);
  EXPECT_EQ(r.latent_frames, 37);
  EXPECT_EQ(r.latent_h, 48);
  EXPECT_EQ(r.latent_w, 84);
  EXPECT_EQ(r.audio_latents, 207);
  EXPECT_EQ(r.steps, 50);
  EXPECT_EQ(r.model_calls, 49);
  EXPECT_EQ(r.seed, 7u);
}

TEST(GenerateRequest, SnapsFramesAndSecondsAndSaysSo) {
  GenerateRequest q = good_request();
  q.frames = 130;
  h3::ResolvedRequest r = h3::resolve(q);
  EXPECT_EQ(r.frames, 141);
  ASSERT_FALSE(r.notes.empty());
  EXPECT_NE(r.notes.back().find("130 snapped up to 141"), std::string::npos);
  q.frames.reset();
  q.seconds = 10;
  r = h3::resolve(q);
  EXPECT_EQ(r.frames, 243);
  EXPECT_EQ(r.latent_frames, 72);
  q.seconds.reset();
  q.aspect = "9:16";
  r = h3::resolve(q);
  EXPECT_EQ(r.width, 768);
  EXPECT_EQ(r.height, 1344);
}

TEST(GenerateRequest, BadRequestsNameTheAllowedRange) {
  auto msg = [](auto edit) {
    GenerateRequest q = good_request();
    edit(q);
    return error_of([&] { h3::resolve(q); });
  };
  EXPECT_NE(msg([](GenerateRequest& q) { q.width = 70, q.height = 64; }).find("multiple of 32"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.width = 64; }).find("both width and height"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.width = 1024, q.height = 128; }).find("1:4 .. 4:1"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.aspect = "5:1"; }).find("1:4 .. 4:1"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.aspect = "wide"; }).find("W:H"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.width = 2048, q.height = 1024; }).find("at most"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.frames = 50; }).find("124..345"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.frames = 350; }).find("snapped up to 362"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.seconds = 20; }).find("5.167 s .. 14.375 s"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.frames = 124, q.seconds = 5; }).find("not both"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.prompt = "  \n"; }).find("prompt is empty"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.prompt = "bad \xff byte"; }).find("UTF-8"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.steps = 1; }).find("2..200"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.steps = 500; }).find("2..200"), std::string::npos);
  EXPECT_NE(msg([](GenerateRequest& q) { q.shift = -1; }).find("shift"), std::string::npos);
}

TEST(GenerateRequest, JsonRoundTripAndUnknownFieldsRefused) {
  const json j = {{"prompt", "rain on a tin roof"},
                  {"width", 512},
                  {"height", 256},
                  {"frames", 124},
                  {"steps", 8},
                  {"seed", 3},
                  {"shift", 12.0},
                  {"audio_shift", 3.0}};
  const GenerateRequest r = GenerateRequest::from_json(j);
  EXPECT_EQ(*r.width, 512);
  EXPECT_EQ(*r.seed, 3u);
  EXPECT_EQ(GenerateRequest::from_json(r.to_json()).to_json(), r.to_json());
  EXPECT_NE(error_of([] {
              GenerateRequest::from_json(json{{"prompt", "x"}, {"cfg", 5}});
            })
                .find("unknown request "
                      "field \"cfg\""),
            std::string::npos);
  EXPECT_NE(error_of([] {
              GenerateRequest::from_json(json{{"prompt", 5}});
            }).find("must be a string"),
            std::string::npos);
  EXPECT_NE(error_of([] { GenerateRequest::from_json(json{{"seed", -4}}); }).find("non-negative"), std::string::npos);
  EXPECT_NE(error_of([] { GenerateRequest::from_json(json{{"width", 1.5}}); }).find("integer"), std::string::npos);
  const h3::ResolvedRequest res = h3::resolve(r);
  EXPECT_EQ(h3::ResolvedRequest::from_json(res.to_json()).to_json(), res.to_json());
}

// LoRAs in a request: JSON form, carried through resolve and the resolved JSON (the server's record), refused
// when the file is missing, is not a LoRA, or the strength is not a finite number.
TEST(GenerateRequest, LorasAreCheckedAndCarried) {
  h3::test::ScratchDir dir;
  const std::string lora = (dir.path() / "l.safetensors").string();
  h3::write_safetensors(lora, {{"blocks.0.mlp.fc2.lora_A.weight", h3::Tensor(h3::DType::f32, {2, 160})},
                               {"blocks.0.mlp.fc2.lora_B.weight", h3::Tensor(h3::DType::f32, {96, 2})}});
  const std::string not_lora = (dir.path() / "w.safetensors").string();
  h3::write_safetensors(not_lora, {{"blocks.0.mlp.fc2.weight", h3::Tensor(h3::DType::f32, {96, 160})}});
  GenerateRequest q = GenerateRequest::from_json(
      json{{"prompt", "x"}, {"loras", json::array({json{{"path", lora}, {"strength", 0.25}}, json{{"path", lora}}})}});
  ASSERT_EQ(q.loras.size(), 2u);
  EXPECT_EQ(q.loras[0].strength, 0.25);
  EXPECT_EQ(q.loras[1].strength, 1.0);
  EXPECT_EQ(GenerateRequest::from_json(q.to_json()).loras, q.loras);
  const h3::ResolvedRequest r = h3::resolve(q);
  EXPECT_EQ(h3::ResolvedRequest::from_json(r.to_json()).loras, q.loras);
  EXPECT_NE(error_of([&] {
              GenerateRequest::from_json(json{{"prompt", "x"}, {"loras", json{{"path", lora}}}});
            }).find("must be a list"),
            std::string::npos);
  auto refused = [&](const std::string& path, double strength) {
    GenerateRequest b;
    b.prompt = "x";
    b.loras = {{path, strength}};
    return error_of([&] { h3::resolve(b); });
  };
  EXPECT_NE(refused((dir.path() / "none.safetensors").string(), 1).find("does not exist"), std::string::npos);
  EXPECT_NE(refused(not_lora, 1).find("is not a LoRA"), std::string::npos);
  EXPECT_NE(refused(lora, std::nan("")).find("strength"), std::string::npos);
}

TEST(ProceduralModels, BuiltInTokenizerIsByteLevel) {
  const h3::Tokenizer t = h3::Tokenizer::from_json_text(h3::builtin_tokenizer_json(), "built-in");
  EXPECT_EQ(t.vocab_size(), 260u);  // the bytes and Qwen's four vision tokens
  EXPECT_EQ(t.token_to_id("<|vision_start|>"), 256);
  EXPECT_EQ(t.token_to_id("<|video_pad|>"), 259);
  EXPECT_EQ(t.encode("a<|image_pad|>"), (std::vector<int32_t>{'a', 258}));
  const std::string s = "Hi \xc3\xa9!";  // "Hi é!"
  const std::vector<int32_t> ids = t.encode(s);
  ASSERT_EQ(ids.size(), s.size());
  for (size_t i = 0; i < s.size(); ++i) EXPECT_EQ(ids[i], static_cast<unsigned char>(s[i]));
  EXPECT_EQ(t.decode(ids), s);
}

// The whole t2va chain against the reference: every step's rows, the final latents, pixels and waveform.
TEST(PipelineGolden, T2vaMiniMatchesTheReferenceInF32) {
  const auto file = h3::test::golden("pipeline-t2va-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  const h3::SafeTensors f = h3::SafeTensors::open(file);
  ASSERT_TRUE(h3::looks_like_pipeline_golden(f));
  h3::PipelineVerifyOptions opt;
  opt.precision = h3::Precision::f32;
  const h3::VerifyReport rep = h3::verify_pipeline_file(f, opt);
  EXPECT_GE(rep.lines.size(), 9u);  // 3 steps x 2 + latents + pixels + waveform
  for (const auto& l : rep.lines) {
    EXPECT_TRUE(l.pass) << l.what << " rel-L2 " << l.rel_l2;
    EXPECT_LE(l.rel_l2, 1e-5) << l.what;
  }
}

namespace {

struct ProcGen {
  h3::Generator gen{h3::ModelPaths{}, [] {
                      h3::GenerateOptions o;
                      o.keep_media = true;
                      return o;
                    }()};
};
ProcGen& proc_gen() {
  static ProcGen g;
  return g;
}

h3::ResolvedRequest small_request(int steps) {
  GenerateRequest q = good_request();
  q.width = 128;
  q.height = 64;
  q.steps = steps;
  return h3::resolve(q, proc_gen().gen.limits());
}

}  // namespace

TEST(Generator, ProceduralModelsRunTheWholeChain) {
  h3::Generator& gen = proc_gen().gen;
  EXPECT_TRUE(gen.procedural());
  EXPECT_EQ(gen.limits().canvas_multiple, 32);
  EXPECT_EQ(gen.sample_rate(), 32000);
  const h3::ResolvedRequest req = small_request(3);
  std::vector<h3::GenerateProgress> seen;
  const h3::GenerateResult r = gen.run(req, "", [&](const h3::GenerateProgress& p) { seen.push_back(p); });
  EXPECT_EQ(r.video_latents.shape(), (h3::Shape{24, 37, 4, 8}));
  EXPECT_EQ(r.audio_latent_rows.shape(), (h3::Shape{2 * 207, 32}));
  EXPECT_EQ(r.pixels01.shape(), (h3::Shape{3, 124, 64, 128}));
  EXPECT_EQ(r.waveform.shape(), (h3::Shape{2, 1, 207 * 800}));
  EXPECT_GT(r.prompt_tokens, 10);
  ASSERT_FALSE(seen.empty());
  EXPECT_EQ(seen.back().phase, "done");
  EXPECT_DOUBLE_EQ(seen.back().percent, 100.0);
  int denoise_steps = 0;
  for (const auto& p : seen) denoise_steps += p.phase == "denoise" && p.step > 0;
  EXPECT_EQ(denoise_steps, req.model_calls);
  for (int64_t i = 0; i < r.pixels01.numel(); i += 997) {
    const double v = r.pixels01.get(i);
    ASSERT_TRUE(v >= 0 && v <= 1) << v;
  }
  // The same request again (models loaded once) gives the same latents, bit for bit.
  const h3::GenerateResult again = gen.run(req, "");
  EXPECT_TRUE(h3::compare(again.video_latents, r.video_latents).bitwise);
  EXPECT_TRUE(h3::compare(again.audio_latent_rows, r.audio_latent_rows).bitwise);
}

TEST(Generator, CancelStopsAtAStepAndWritesNothing) {
  h3::Generator& gen = proc_gen().gen;
  const h3::ResolvedRequest req = small_request(6);
  h3::test::ScratchDir dir;
  const std::string out = (dir.path() / "cancel.mp4").string();
  std::atomic<bool> cancel{false};
  int last_step = 0;
  auto progress = [&](const h3::GenerateProgress& p) {
    if (p.phase == "denoise") last_step = p.step;
    if (p.phase == "denoise" && p.step == 2) cancel = true;
  };
  EXPECT_THROW(gen.run(req, out, progress, &cancel), h3::Cancelled);
  EXPECT_EQ(last_step, 2);
  EXPECT_TRUE(std::filesystem::is_empty(dir.path()));
  // The generator stays usable.
  cancel = false;
  EXPECT_NO_THROW(gen.run(req, "", {}, &cancel));
}

// A cancel asked as each phase starts stops the run inside that phase or at its end (never after the next one
// has run), writes nothing, and leaves the generator usable. The prompt encoding stops before its first text
// layer (one control word per layer), the write within one frame.
TEST(Generator, CancelReachesEveryPhase) {
  h3::Generator& gen = proc_gen().gen;
  const h3::ResolvedRequest req = small_request(3);
  h3::test::ScratchDir dir;
  const std::string out = (dir.path() / "cancel.mp4").string();
  const std::pair<const char*, const char*> cases[] = {
      {"encode", "while encoding the prompt (before text layer 1 of 50)"},
      {"denoise", "during denoising"},
      {"decode_video", "before the audio decode"},
      {"decode_audio", "before writing"},
      {"write", "while writing the video"},
  };
  for (const auto& [phase, expected] : cases) {
    std::atomic<bool> cancel{false};
    std::vector<std::string> phases;
    auto progress = [&](const h3::GenerateProgress& p) {
      if (phases.empty() || phases.back() != p.phase) phases.push_back(p.phase);
      if (p.phase == phase && p.step == 0) cancel = true;
    };
    std::string message;
    try {
      (void)gen.run(req, out, progress, &cancel);
    } catch (const h3::Cancelled& e) {
      message = e.what();
    }
    EXPECT_NE(message.find(expected), std::string::npos) << phase << ": " << message;
    EXPECT_EQ(phases.back(), phase) << "the run went on past " << phase;
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << phase << ": a file was left";
  }
  // Still usable, and a run without a cancel writes its video.
  std::atomic<bool> cancel{false};
  EXPECT_NO_THROW(gen.run(req, out, {}, &cancel));
  EXPECT_TRUE(std::filesystem::exists(out));
}

// `h3 generate` end to end through the binary.
namespace {

using h3::test::CliResult;
using h3::test::run_h3;

std::string slurp(const std::filesystem::path& p) {
  FILE* f = std::fopen(p.c_str(), "rb");
  std::string s;
  if (!f) return s;
  std::array<char, 65536> buf{};
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) s.append(buf.data(), n);
  std::fclose(f);
  return s;
}

const char* kSmall =
    "--log-level warn generate --prompt 'a kite over the sea' --width 128 --height 64 --steps 3 "
    "--seed 11 --latents";

}  // namespace

TEST(GenerateCli, OneTwoAndThreeRanksWriteTheSameLatents) {
  h3::test::ScratchDir dir;
  std::string first_latents;
  const std::pair<const char*, const char*> variants[] = {{"--ranks 1", ""},
                                                          {"--ranks 2", ""},
                                                          {"--ranks 3", ""},
                                                          {"--ranks 3", "--mode ulysses-ag"},
                                                          {"--ranks 3", "--encoder-ranks 1"},
                                                          // the text tower tensor-parallel on 2 dedicated ranks
                                                          {"--ranks 3", "--encoder-ranks 2"}};
  for (const auto& [global, local] : variants) {
    SCOPED_TRACE(std::string(global) + " " + local);
    const auto out = dir.path() / "clip.mp4";
    const CliResult r = run_h3(std::string(global) + " " + kSmall + " " + local + " -o " + out.string());
    ASSERT_EQ(r.status, 0) << r.out;
    EXPECT_NE(r.out.find("meaningless"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("--model DIR"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("timings: load"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("\"model_calls\": 2"), std::string::npos) << r.out;
    const std::string mp4 = slurp(out);
    ASSERT_GT(mp4.size(), 1000u) << r.out;
    EXPECT_EQ(mp4.substr(4, 4), "ftyp");
    EXPECT_NE(mp4.find("moov"), std::string::npos);
    EXPECT_NE(mp4.find("\"seed\":11"), std::string::npos) << "resolved request stored in the MP4 metadata";
    const std::string latents = slurp(dir.path() / "clip.latents.safetensors");
    ASSERT_FALSE(latents.empty()) << r.out;
    if (first_latents.empty()) first_latents = latents;
    EXPECT_TRUE(latents == first_latents) << "latents differ from the 1-rank run";
    std::filesystem::remove(out);
    std::filesystem::remove(dir.path() / "clip.latents.safetensors");
  }
}

TEST(GenerateCli, BadRequestsAreRefusedBeforeAnyWorkAndLeaveNoFile) {
  h3::test::ScratchDir dir;
  const std::string out = (dir.path() / "bad.mp4").string();
  const std::pair<const char*, const char*> cases[] = {
      {"--prompt x --width 100 --height 64", "multiple of 32"},
      {"--prompt x --aspect 6:1", "1:4 .. 4:1"},
      {"--prompt x --frames 40", "124..345"},
      {"--prompt x --seconds 16", "124..345"},
      {"--prompt ''", "prompt is empty"},
      {"--prompt x --steps 1", "2..200"},
      {"--prompt x --encoder-ranks 1", "--encoder-ranks 1"},
      {"--prompt x --precision fp8", "fp8 runs on the GPU only"},
      {"--prompt x --vae-precision bf16", "bf16 runs on the GPU only"},
      {"--prompt x --text-device cuda", "--text-device cuda needs --device cuda"},
  };
  for (const auto& [args, expect] : cases) {
    SCOPED_TRACE(args);
    const CliResult r = run_h3(std::string("generate ") + args + " -o " + out);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("dit "), std::string::npos) << "no model may be loaded for a bad request:\n" << r.out;
    EXPECT_TRUE(std::filesystem::is_empty(dir.path())) << r.out;
  }
}

// A checkpoint holding a NaN (or an Inf) is refused when the weights load, before any step runs, naming the file,
// the weight and the element; nothing is written.
TEST(GenerateCli, NonFiniteCheckpointWeightsAreRefusedBeforeTheRun) {
  h3::test::ScratchDir dir;
  const std::string base = (dir.path() / "mini.safetensors").string();
  const CliResult conv = run_h3("--log-level warn convert procedural:mini -o " + base);
  ASSERT_EQ(conv.status, 0) << conv.out;
  const h3::SafeTensors f = h3::SafeTensors::open(base);
  const std::string victim = "transformer_blocks.1.attn.to_k.weight";
  ASSERT_TRUE(f.has(victim));
  for (const double bad : {std::nan(""), -HUGE_VAL}) {
    std::vector<std::pair<std::string, h3::Tensor>> w;
    for (const auto& k : f.keys()) {
      h3::Tensor t = f.get(k).to(h3::DType::f32);  // a copy
      if (k == victim) t.data<float>()[17] = static_cast<float>(bad);
      w.emplace_back(k, t);
    }
    const std::string damaged = (dir.path() / "damaged.safetensors").string();
    h3::write_safetensors(damaged, w, f.metadata());
    const std::string out = (dir.path() / "nan.mp4").string();
    const CliResult r = run_h3("--log-level warn generate --dit " + damaged +
                               " --prompt x --width 128 --height 64 --steps 2 -o " + out);
    EXPECT_NE(r.status, 0) << r.out;
    EXPECT_NE(r.out.find(damaged), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("'" + victim + "' holds 1 non-finite value"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("element 17"), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("progress:"), std::string::npos) << "refused before the run:\n" << r.out;
    EXPECT_FALSE(std::filesystem::exists(out));
  }
}

// --json: the run's record, with the time of each phase, time to MP4 without the loads, and the geometry.
TEST(GenerateCli, JsonRecordSplitsTheTimeByPhase) {
  h3::test::ScratchDir dir;
  const auto out = dir.path() / "clip.mp4";
  const auto rec = dir.path() / "run.json";
  const CliResult r = run_h3(std::string(kSmall) + " --json " + rec.string() + " -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("time to MP4 (loads excluded)"), std::string::npos) << r.out;
  const json j = json::parse(slurp(rec));
  EXPECT_EQ(j.at("resolution"), "128x64");
  EXPECT_EQ(j.at("frames"), 124);
  EXPECT_EQ(j.at("steps"), 3);
  EXPECT_EQ(j.at("precision"), "f32");
  EXPECT_EQ(j.at("device"), "cpu");
  EXPECT_TRUE(j.at("wrote_mp4").get<bool>());
  const json& t = j.at("timings");
  double phases = 0;
  for (const char* p : {"encode", "denoise", "decode_video", "decode_audio", "mux"}) {
    ASSERT_TRUE(t.contains(p)) << t.dump();
    EXPECT_GE(t.at(p).get<double>(), 0.0) << p;
    phases += t.at(p).get<double>();
  }
  EXPECT_TRUE(t.contains("load")) << t.dump();
  EXPECT_NEAR(j.at("time_to_mp4_s").get<double>(), phases, 1e-9);
  std::vector<std::string> loaded;
  for (const auto& l : j.at("loads")) loaded.push_back(l.at("model"));
  EXPECT_EQ(loaded, (std::vector<std::string>{"dit", "video_vae", "audio_vae", "text"})) << j.at("loads").dump();
  EXPECT_EQ(j.at("latents_fnv1a").at("video").get<std::string>().size(), 16u);
  // Each DiT call's seconds: as many as the calls, together within the denoise's, the median that of the calls
  // after the first (3 steps: 2 calls, so the second call alone).
  const json& calls = j.at("dit_calls");
  const auto secs = calls.at("seconds").get<std::vector<double>>();
  ASSERT_EQ(secs.size(), 2u) << calls.dump();
  EXPECT_LE(secs[0] + secs[1], t.at("denoise").get<double>()) << calls.dump();
  EXPECT_GT(secs[1], 0.0);
  EXPECT_EQ(calls.at("first_s").get<double>(), secs[0]);
  EXPECT_EQ(calls.at("median_s").get<double>(), secs[1]);
  const auto fwd = calls.at("forward_seconds").get<std::vector<double>>();  // each inside its call
  ASSERT_EQ(fwd.size(), 2u) << calls.dump();
  EXPECT_GT(fwd[1], 0.0);
  EXPECT_LE(fwd[0], secs[0]);
  EXPECT_LE(fwd[1], secs[1]);
  EXPECT_NE(r.out.find("s per DiT call; median "), std::string::npos) << r.out;
}

// procedural:full names every component at the released shapes (h3-model-spec: Qwen3-VL-32B's text tower, 64 layers
// of width 5120, feeding a DiT that reads 5120-wide embeddings; the video VAE's 36-layer ViT decoder). Opening it reads
// configs and headers only (nothing is generated on the CPU here), and its text tower is usable: the job runs with no
// download and no --embeddings.
TEST(ProceduralModels, FullOpensEveryComponentAtTheReleasedShapes) {
  h3::ModelPaths paths;
  paths.model_dir = "procedural:full";
  const h3::ModelSources s = h3::open_model_sources(paths);
  EXPECT_EQ(s.text_problem, "");
  EXPECT_TRUE(s.text_procedural);
  EXPECT_TRUE(s.any_procedural);
  EXPECT_EQ(s.text_config.hidden, 5120);
  EXPECT_EQ(s.text_config.n_layers, 64);
  EXPECT_EQ(s.dit_config.text_dim, 5120);
  EXPECT_EQ(s.vvae_config.decoder_num_layers, 36);
  EXPECT_EQ(h3::text_file_bytes(s, 50), 0);  // generated, not read
  // A seed travels to every component; a bad spec is refused naming the flag.
  paths.model_dir = "procedural:full:seed=9";
  EXPECT_EQ(h3::open_model_sources(paths).text_problem, "");
  paths.model_dir = "";
  paths.text_encoder = "procedural:huge";
  EXPECT_NE(error_of([&] { (void)h3::open_model_sources(paths); }).find("--text-encoder"), std::string::npos);
}

// The options each device starts from, and the combinations refused before anything loads.
TEST(GenerateOptions, DefaultsPerDeviceAndRefusals) {
  const h3::GenerateOptions cpu = h3::default_generate_options(h3::Device::cpu);
  EXPECT_EQ(cpu.precision, h3::Precision::f32);
  EXPECT_EQ(cpu.vae_precision, h3::Precision::f32);
  EXPECT_EQ(cpu.text_device, h3::Device::cpu);
  const h3::GenerateOptions f64 = h3::default_generate_options(h3::Device::cpu, "f64");
  EXPECT_EQ(f64.vae_precision, h3::Precision::f64);
  EXPECT_EQ(f64.text_precision, h3::Precision::f64);
  const h3::GenerateOptions gpu = h3::default_generate_options(h3::Device::cuda);
  EXPECT_EQ(gpu.precision, h3::Precision::bf16);
  EXPECT_EQ(gpu.vae_precision, h3::Precision::bf16);
  EXPECT_EQ(gpu.text_device, h3::Device::cuda);
  EXPECT_EQ(gpu.text_precision, h3::Precision::bf16);  // the released recipe for the towers on the GPU
  EXPECT_EQ(gpu.memory, h3::MemoryPolicy::phases);
  EXPECT_EQ(h3::default_generate_options(h3::Device::cuda, "fp8").precision, h3::Precision::fp8);
  EXPECT_NO_THROW(h3::check_generate_options(cpu));
  EXPECT_NO_THROW(h3::check_generate_options(gpu));
  h3::GenerateOptions bad = gpu;
  bad.vae_precision = h3::Precision::f64;
  EXPECT_NE(error_of([&] { h3::check_generate_options(bad); }).find("f64 runs on the CPU only"), std::string::npos);
  bad = cpu;
  bad.precision = h3::Precision::fp8;
  EXPECT_NE(error_of([&] { h3::check_generate_options(bad); }).find("fp8 runs on the GPU only"), std::string::npos);
  // The towers: bf16 on the GPU only, f64 on the CPU only, never fp8.
  bad = gpu;
  bad.text_device = h3::Device::cpu;  // bf16 kept: refused
  EXPECT_NE(error_of([&] { h3::check_generate_options(bad); }).find("--text-precision bf16 runs on the GPU only"),
            std::string::npos);
  bad.text_precision = h3::Precision::f32;
  EXPECT_NO_THROW(h3::check_generate_options(bad));
  bad = gpu;
  bad.text_precision = h3::Precision::f64;
  EXPECT_NE(error_of([&] { h3::check_generate_options(bad); }).find("--text-precision f64 runs on the CPU only"),
            std::string::npos);
  bad.text_precision = h3::Precision::fp8;
  EXPECT_NE(error_of([&] { h3::check_generate_options(bad); }).find("--text-precision fp8"), std::string::npos);
}

// The generator's own record of a CPU run: every phase timed, the constructor's loads reported once.
TEST(Generator, TimingsByPhaseAndLoadsOnlyOnTheFirstRun) {
  h3::GenerateOptions o;
  h3::Generator gen(h3::ModelPaths{}, o);
  const h3::ResolvedRequest req = small_request(2);
  const h3::GenerateResult a = gen.run(req, ""), b = gen.run(req, "");
  auto phases = [](const h3::GenerateResult& r) {
    std::vector<std::string> p;
    for (const auto& t : r.timings) p.push_back(t.phase);
    return p;
  };
  // The text tower loads per request on the CPU (freed before denoising); the DiT and VAEs once.
  EXPECT_EQ(phases(a), (std::vector<std::string>{"load", "encode", "denoise", "decode_video", "decode_audio", "mux"}));
  EXPECT_EQ(phases(b), phases(a));
  ASSERT_EQ(a.loads.size(), 4u);
  ASSERT_EQ(b.loads.size(), 1u);
  EXPECT_EQ(b.loads[0].model, "text");
  double sum = 0;
  for (const auto& t : b.timings)
    if (t.phase != "load") sum += t.seconds;
  EXPECT_DOUBLE_EQ(b.time_to_mp4(), sum);
  EXPECT_TRUE(a.peaks.empty());  // CPU runs measure no device memory
}

// A request may name the DiT's precision: the generator rebuilds its DiT for it (a load) and back, and refuses one
// its device cannot run before loading anything.
TEST(Generator, PerRequestPrecisionRebuildsTheDit) {
  h3::Generator& gen = proc_gen().gen;
  h3::ResolvedRequest req = small_request(2);
  const h3::GenerateResult f32 = gen.run(req, "");
  EXPECT_EQ(f32.precision, h3::Precision::f32);
  req.precision = "bf16";
  const h3::GenerateResult bf16 = gen.run(req, "");
  EXPECT_EQ(bf16.precision, h3::Precision::bf16);
  bool reloaded = false;
  for (const auto& l : bf16.loads) reloaded |= l.model == "dit";
  EXPECT_TRUE(reloaded);
  EXPECT_FALSE(h3::compare(bf16.video_latents, f32.video_latents).bitwise);
  EXPECT_LE(h3::compare(bf16.video_latents, f32.video_latents).rel_l2, 5e-2);
  req.precision = "fp8";
  EXPECT_NE(error_of([&] { gen.run(req, ""); }).find("runs its DiT on the CPU"), std::string::npos);
  req.precision = "";
  EXPECT_TRUE(h3::compare(gen.run(req, "").video_latents, f32.video_latents).bitwise);
  GenerateRequest q = good_request();
  q.precision = "f16";
  EXPECT_NE(error_of([&] { h3::resolve(q); }).find("precision 'f16' is not allowed"), std::string::npos);
}

// The Generator with file components (the golden layout, weight. prefix) and precomputed inputs reproduces
// the whole-chain reference; the request is built by hand because the golden geometry (39 frames) is below
// the request window.
TEST(Generator, FileComponentsAndPrecomputedInputsReproduceThePipelineGolden) {
  const auto file = h3::test::golden("pipeline-t2va-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  const h3::SafeTensors f = h3::SafeTensors::open(file);
  h3::ModelPaths paths;
  paths.dit = h3::pipeline_sibling(f, "dit");
  paths.video_vae = h3::pipeline_sibling(f, "video-vae");
  paths.audio_vae = h3::pipeline_sibling(f, "audio-vae");
  h3::GenerateOptions opt;
  opt.keep_media = true;
  h3::Generator gen(paths, opt);
  EXPECT_EQ(gen.limits().canvas_multiple, 8);  // the mini VAE's 4x stride times the patch
  EXPECT_EQ(h3::Generator::limits_for(paths).canvas_multiple, 8);
  h3::ResolvedRequest req;
  req.prompt = "(precomputed)";
  req.width = 80, req.height = 48, req.frames = 39, req.seconds = 39.0 / 24;
  req.latent_frames = 12, req.latent_h = 12, req.latent_w = 20, req.audio_latents = 65;
  req.steps = 4, req.model_calls = 3, req.seed = 0;
  h3::PrecomputedInputs pre;
  pre.prompt_embeds = f.get("input.prompt_embeds");
  pre.video_noise = f.get("input.video_noise");
  pre.audio_noise_rows = f.get("input.audio_noise_rows");
  const h3::GenerateResult r = gen.run(req, "", {}, nullptr, &pre);
  EXPECT_LE(h3::compare(r.video_latents, f.get("output.video_latents")).rel_l2, 1e-5);
  EXPECT_LE(h3::compare(r.audio_latent_rows, f.get("step2.audio_rows")).rel_l2, 1e-5);
  EXPECT_LE(h3::compare(r.pixels01, f.get("output.pixels01")).rel_l2, 1e-5);
  EXPECT_LE(h3::compare(r.waveform, f.get("output.waveform")).rel_l2, 1e-5);
}

// The MP4's comment (the resolved request) names keyframes, references and LoRAs by file name only: a server's
// output is downloaded by its client, and the comment held the server's absolute upload path.
TEST(Generator, Mp4CommentNamesNoServerPath) {
  h3::ModelSources src;
  h3::ResolvedRequest req;
  req.prompt = "x";
  h3::ConditionMedia m;
  m.role = "first";
  m.path = "/srv/h3/store/uploads/0123abcd/0.png";
  req.media.push_back(m);
  req.loras.push_back({"/srv/h3/loras/style.safetensors", 0.5});
  const std::string comment = h3::media_spec(src, req).metadata.at("comment");
  EXPECT_EQ(comment.find("/srv"), std::string::npos) << comment;
  const nlohmann::json j = h3::parse_json_bounded(comment, "comment");
  EXPECT_EQ(j["media"][0]["path"], "0.png");
  EXPECT_EQ(j["loras"][0]["path"], "style.safetensors");
  EXPECT_EQ(j["prompt"], "x");
}

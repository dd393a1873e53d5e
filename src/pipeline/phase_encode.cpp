// The encode phase (phases.h): the prompt embeddings on every rank (the text tower on the encoder ranks, or rank 0's
// precomputed ones), the packed layout, and the keyframe / reference rows.
#include <nlohmann/json.hpp>

#include "core/json_limits.h"
#include "model/qwen3vl/vision.h"
#include "pipeline/bcast.h"
#include "pipeline/phases.h"

namespace h3 {

namespace {

using json = nlohmann::json;

// The prompt of `r` (rank 0): the vision tower (where the text tower runs, in its precision) is loaded for requests
// with pictures or videos and freed when the prompt is built (it is small next to the LM; its rows are all the LM
// needs).
PromptInputs prepare_prompt(ModelResidency& models, const ResolvedRequest& r) {
  const ModelSources& src = models.sources();
  bool visual = false;
  for (const ConditionMedia& c : r.media) visual |= c.visual();
  if (!visual) return h3::prepare_prompt(r, *src.tokenizer, nullptr);
  H3_CHECK(src.text_weights && has_qwen3vl_vision(*src.text_weights),
           "{} with pictures or videos needs Qwen3-VL's vision tower, but the text encoder {} holds none (no "
           "'*patch_embed.proj.weight'; e.g. a text-only truncated encoder): pass the full Qwen3-VL "
           "text_encoder folder with --text-encoder",
           r.mode, src.text_path);
  const Qwen3VlVisionConfig vc = detect_qwen3vl_vision_config(*src.text_weights);
  H3_CHECK(vc.out_hidden == src.text_config.hidden,
           "the vision tower in {} gives {}-wide rows but its text decoder is {} wide: the file mixes models",
           src.text_path, vc.out_hidden, src.text_config.hidden);
  const std::unique_ptr<Qwen3VlVisionModel> vision = models.load_vision(vc);
  return h3::prepare_prompt(r, *src.tokenizer, vision.get());
}

// Rank 0 (which holds the keyframe / reference files) builds the prompt: tokens, and for pictures and videos the
// vision tower's rows and the mRoPE positions; the encoder ranks get it by broadcast. An error there (bad file,
// missing tower) travels too, so every rank fails the request with rank 0's message.
PromptInputs shared_prompt(RequestRun& run, ModelResidency& models) {
  Comm& comm = run.comm;
  PromptInputs prompt;
  std::string failure;
  if (run.root) {
    try {
      prompt = prepare_prompt(models, run.res.request);
    } catch (const Error& e) {
      failure = e.what();
    }
  }
  if (comm.size() > 1) failure = bcast_string(comm, failure, 0, "prompt preparation status");
  if (!failure.empty()) {
    if (run.root) fail("{}", failure);
    fail("rank 0 could not prepare the prompt: {}", failure);
  }
  if (comm.size() > 1) bcast_prompt(comm, prompt, 0);
  return prompt;
}

// The text tower's embeddings of `prompt` on an encoder rank (the resident tower, or one loaded for this request
// over the whole group and freed here, before denoising); `extra` gets the JSON {vision_ranges, vision_rows,
// warnings} the other ranks receive.
Tensor tower_embeddings(RequestRun& run, ModelResidency& models, const PromptInputs& prompt, std::string& extra) {
  Comm& comm = run.comm;
  std::unique_ptr<Qwen3VlTextModel> tower =
      models.text() ? nullptr : models.load_text(comm.size() > 1 ? &comm : nullptr);
  PromptEncoding pe = encode_prompt(prompt, models.text() ? *models.text() : *tower, kConditioningLayer,
                                    [&run](int64_t li, int64_t n) { run.check_cancel_layer(li, n); });
  extra = json{{"vision_ranges", pe.vision_ranges}, {"vision_rows", pe.vision_rows}, {"warnings", pe.warnings}}.dump();
  return pe.embeds.on_device() ? pe.embeds.cpu().to(DType::f32) : pe.embeds;
}

// Prompt embeddings on every rank (f32, host), from the text tower or precomputed; `vision_ranges` gets the prompt
// rows the vision tower fed.
Tensor prompt_embeddings(RequestRun& run, ModelResidency& models,
                         std::vector<std::pair<int64_t, int64_t>>& vision_ranges) {
  Comm& comm = run.comm;
  const RankRoles& roles = run.roles;
  const PrecomputedInputs* pre = run.pre;
  GenerateResult& res = run.res;
  Tensor embeds;
  std::string prompt_extra;  // JSON {vision_ranges, warnings} from the encoding rank
  const bool have_pre_embeds = pre && pre->prompt_embeds.defined() && pre->prompt_embeds.numel() > 0;
  // Rank 0 decides where the embeddings come from (precomputed ones are taken from rank 0).
  int32_t from_pre = have_pre_embeds ? 1 : 0;
  if (comm.size() > 1) comm.broadcast(&from_pre, sizeof(from_pre), 0, "embeddings source");
  const bool precomputed = from_pre != 0;
  const int src_rank = roles.embeddings_source(precomputed);
  PromptInputs prompt;
  if (!precomputed) prompt = shared_prompt(run, models);
  if (roles.computes_embeddings(precomputed)) {
    if (precomputed) {
      H3_CHECK(have_pre_embeds, "rank 0 passed precomputed embeddings but this rank did not");
      embeds = pre->prompt_embeds.to(DType::f32);
    } else {
      embeds = tower_embeddings(run, models, prompt, prompt_extra);
    }
    const int64_t text_dim = models.sources().dit_config.text_dim;
    H3_CHECK(embeds.ndim() == 2 && embeds.dim(1) == text_dim, "prompt embeddings are {}, the DiT needs [L, {}]",
             shape_str(embeds.shape()), text_dim);
  } else if (!precomputed) {  // a rank outside the encoder ranks: the per-layer control words, in step with them
    for (int64_t li = 0; li < kConditioningLayer; ++li) run.check_cancel_layer(li, kConditioningLayer);
  }
  // Every encoder rank ran the (tensor-parallel) tower; with K = 0 that is every rank, and all end with the
  // embeddings.
  if (roles.embeddings_broadcast(precomputed)) bcast_tensor(comm, embeds, src_rank, "prompt embeddings");
  if (roles.embeddings_broadcast(precomputed))
    prompt_extra = bcast_string(comm, prompt_extra, src_rank, "prompt vision rows");
  run.check_cancel("after encoding the prompt");
  res.prompt_tokens = embeds.dim(0);
  if (!prompt_extra.empty()) {
    const json pj = parse_json_bounded(prompt_extra, "the broadcast vision rows", kJsonMaxDepth, false);
    vision_ranges = pj.at("vision_ranges").get<std::vector<std::pair<int64_t, int64_t>>>();
    res.vision_rows = pj.at("vision_rows").get<int64_t>();
    res.vision_blocks = static_cast<int64_t>(vision_ranges.size());
    res.warnings = pj.at("warnings").get<std::vector<std::string>>();
  } else if (!res.request.media.empty()) {
    res.warnings.push_back("precomputed prompt embeddings: no vision rows for the keyframes / references");
  }
  return embeds;
}

// Keyframes / references: rank 0 reads and encodes them (the VAE encoders run on the CPU; a VAE pair on the CPU
// serves when the GPU decoders are not resident), every rank gets the rows (pipeline/conditions.h).
ConditionRows condition_rows(RequestRun& run, ModelResidency& models, const PackedLayout& layout) {
  Comm& comm = run.comm;
  const ResolvedRequest& req = run.res.request;
  ConditionRows cond;
  if (req.media.empty()) return cond;
  const ModelResidency::VaeEncoders enc = models.vae_encoders();
  H3_CHECK(enc.video->has_encoder() && enc.audio->has_encoder(),
           "{} needs the VAE encoders but {} has none: pass a video VAE / audio VAE with encoder weights", req.mode,
           enc.video->has_encoder() ? models.sources().avae_path : models.sources().vvae_path);
  if (run.root) cond = encode_conditions(req, *enc.video, *enc.audio);
  if (comm.size() > 1 && layout.num_condition_video_rows > 0) bcast_tensor(comm, cond.video, 0, "condition video rows");
  if (comm.size() > 1 && layout.num_condition_audio_rows > 0) bcast_tensor(comm, cond.audio, 0, "reference audio rows");
  run.check_cancel("after encoding the keyframes / references");
  return cond;
}

}  // namespace

Encoded encode_phase(RequestRun& run, ModelResidency& models) {
  run.check_cancel("before encoding");
  run.report("encode", 0, 1, 0, RequestRun::w_encode);
  const PhaseMeter meter(models.gpu());
  const auto t0 = phase_clock::now();
  const size_t loads0 = models.loads().size();
  Encoded enc;
  std::vector<std::pair<int64_t, int64_t>> vision_ranges;
  enc.embeds = prompt_embeddings(run, models, vision_ranges);
  const ResolvedRequest& req = run.res.request;
  enc.layout = std::make_shared<const PackedLayout>(
      request_layout(req, text_tags_with_vision(enc.embeds.dim(0), vision_ranges)));
  enc.cond = condition_rows(run, models, *enc.layout);
  models.after_encode();
  phase_done(run, models, "encode", t0, loads0);
  meter.done("encode", run.res);
  run.report("encode", 1, 1, 0, RequestRun::w_encode);
  return enc;
}

}  // namespace h3

#include "verify/qwen3vl_vision.h"

#include <cstring>
#include <nlohmann/json.hpp>

#include "core/compare.h"
#include "core/json_limits.h"
#include "core/log.h"
#include "model/qwen3vl/qwen3vl.h"

namespace h3 {

namespace {

std::vector<GridThw> grids_of(const Tensor& t) {
  std::vector<GridThw> g;
  for (int64_t i = 0; i + 2 < t.numel(); i += 3)
    g.push_back(
        {static_cast<int64_t>(t.get(i)), static_cast<int64_t>(t.get(i + 1)), static_cast<int64_t>(t.get(i + 2))});
  return g;
}

// u8 [H, W, 3] images or a u8 [F, H, W, 3] video as a list of frames.
std::vector<Tensor> frames_of(const Tensor& t) {
  if (t.ndim() == 3) return {t};
  std::vector<Tensor> out;
  for (int64_t i = 0; i < t.dim(0); ++i) out.push_back(t.rows(i, i + 1).reshape({t.dim(1), t.dim(2), t.dim(3)}));
  return out;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  int64_t n = 0;
  for (const auto& p : parts) n += p.dim(0);
  Tensor out(parts.at(0).dtype(), {n, parts[0].dim(1)});
  size_t at = 0;
  for (const auto& p : parts) {
    std::memcpy(static_cast<std::byte*>(out.raw()) + at, p.raw(), p.nbytes());
    at += p.nbytes();
  }
  return out;
}

}  // namespace

bool looks_like_qwen3vl_vision_golden(const SafeTensors& f) {
  if (!f.has("vl.input.pixel_values")) return false;
  for (const auto& k : f.keys())
    if (k.ends_with("patch_embed.proj.weight")) return true;
  return false;
}

namespace {

// The token ids and the image processor's settings a golden file was made with (its "config" and "preprocess"
// metadata).
struct VisionGoldenSetup {
  VisionTokenIds tok;
  VlPreprocessConfig pre;
};

VisionGoldenSetup read_setup(const SafeTensors& f, const Qwen3VlVisionConfig& vcfg) {
  VisionGoldenSetup g;
  VisionTokenIds& tok = g.tok;
  VlPreprocessConfig& pre = g.pre;
  pre.patch = vcfg.patch;
  pre.temporal_patch = vcfg.temporal_patch;
  pre.merge = vcfg.merge;
  try {
    const auto j =
        parse_json_bounded(f.meta("config").empty() ? "{}" : f.meta("config"), "config", kJsonMaxDepth, false);
    tok.vision_start = j.value("vision_start_token_id", tok.vision_start);
    tok.vision_end = j.value("vision_end_token_id", tok.vision_end);
    tok.image = j.value("image_token_id", tok.image);
    tok.video = j.value("video_token_id", tok.video);
    if (!f.meta("preprocess").empty()) {
      const auto p = parse_json_bounded(f.meta("preprocess"), "preprocess", kJsonMaxDepth, false);
      for (int c = 0; c < 3; ++c) {
        pre.mean[c] = p.value("image_mean", 0.5);
        pre.std[c] = p.value("image_std", 0.5);
      }
      pre.min_pixels = p.value("min_pixels", pre.min_pixels);
      pre.max_pixels = p.value("max_pixels", pre.max_pixels);
    }
  } catch (const std::exception& e) {
    fail("{}: unreadable config/preprocess metadata: {}", f.path(), e.what());
  }
  return g;
}

// The tolerance of each output: bf16 1.5x transformers' own bf16 error on it (metadata reference_rel_l2_vs_f64, from
// the generator's run on a GPU); f32 1e-5, f64 1e-6; `tolerance` > 0 overrides.
class Tolerances {
 public:
  Tolerances(const SafeTensors& f, Precision precision, double tolerance)
      : f_(f),
        tol_(tolerance > 0                 ? tolerance
             : precision == Precision::f64 ? 1e-6
                                           : 1e-5) {
    if (precision != Precision::bf16 || tolerance > 0) return;
    try {
      bf16_errors_ =
          parse_json_bounded(f.meta("reference_rel_l2_vs_f64"), "reference_rel_l2_vs_f64", kJsonMaxDepth, false)
              .at("bf16");
    } catch (const std::exception& e) {
      fail(
          "{}: no transformers bf16 errors in its metadata ({}): regenerate it with "
          "scripts/device/make_qwen3vl_vision_golden.py on a GPU machine, or pass --tol",
          f.path(), e.what());
    }
  }
  double of(const std::string& output) const {
    if (bf16_errors_.is_null()) return tol_;
    if (!bf16_errors_.contains(output))
      fail("{}: no transformers bf16 error for '{}' in reference_rel_l2_vs_f64", f_.path(), output);
    return 1.5 * bf16_errors_[output].get<double>();
  }

 private:
  const SafeTensors& f_;
  double tol_;
  nlohmann::json bf16_errors_;
};

// Our preprocessing of the file's raw images / video against its pixel rows and grids.
void check_preprocessing(const SafeTensors& f, const VlPreprocessConfig& pre, const Qwen3VlInputs& in,
                         VerifyReport& rep) {
  std::vector<Tensor> rows;
  std::vector<GridThw> grids;
  for (int i = 0; f.has("vl.input.image" + std::to_string(i)); ++i) {
    VlPixels px = preprocess_frames(frames_of(f.get("vl.input.image" + std::to_string(i))), pre);
    rows.push_back(px.pixels);
    grids.push_back(px.grid);
  }
  if (!rows.empty()) {
    rep.add("vl preprocess images: pixel rows", concat_rows(rows).cpu(), in.image_pixels, 1e-12);
    rep.add_exact("vl preprocess images: grids", grids == in.image_grids);
  }
  if (f.has("vl.input.video")) {
    VlPixels px = preprocess_frames(frames_of(f.get("vl.input.video")), pre);
    rep.add("vl preprocess video: pixel rows", px.pixels.cpu(), in.video_pixels, 1e-12);
    rep.add_exact("vl preprocess video: grid", std::vector<GridThw>{px.grid} == in.video_grids);
  }
}

// The prompt's vision rows taken from the file's reference outputs (image rows from `image`, video rows from
// `video`, in prompt order) instead of our vision tower's.
Tensor reference_rows(const SafeTensors& f, const std::string& out, const Qwen3VlPrepared& prep,
                      const Qwen3VlInputs& in, const VisionTokenIds& tok, DType dtype, const std::string& image,
                      const std::string& video) {
  const Tensor im = f.has(out + image) ? f.get(out + image).to(dtype) : Tensor();
  const Tensor vi = f.has(out + video) ? f.get(out + video).to(dtype) : Tensor();
  const int64_t width = prep.extras.embeds.dim(1);
  const int64_t es = static_cast<int64_t>(dtype_size(dtype));
  Tensor t(dtype, {static_cast<int64_t>(prep.extras.rows.size()), width});
  int64_t next_image = 0, next_video = 0;
  for (size_t r = 0; r < prep.extras.rows.size(); ++r) {
    const bool is_image = in.ids[static_cast<size_t>(prep.extras.rows[r])] == tok.image;
    const Tensor& src = is_image ? im : vi;
    const int64_t row = is_image ? next_image++ : next_video++;
    if (!src.defined() || src.ndim() != 2 || src.dim(1) != width || row >= src.dim(0))
      fail(
          "{}: {} has no row {} of width {} for prompt position {}; regenerate the file with "
          "scripts/device/make_qwen3vl_vision_golden.py",
          f.path(), out + (is_image ? image : video), row, width, prep.extras.rows[r]);
    std::memcpy(static_cast<std::byte*>(t.raw()) + static_cast<int64_t>(r) * width * es,
                static_cast<const std::byte*>(src.raw()) + row * width * es, static_cast<size_t>(width) * es);
  }
  return t;
}

// The processor case: a resized image through our preprocessing against transformers' image processor.
void check_processor_case(const SafeTensors& f, const VlPreprocessConfig& pre, VerifyReport& rep) {
  if (!f.has("preproc.output.pixel_values")) {
    spdlog::warn("{}: no 'preproc' case (the generator could not run the image processor): resize unchecked", f.path());
    return;
  }
  const VlPixels px = preprocess_frames(frames_of(f.get("preproc.input.image")), pre);
  const bool grid_ok = std::vector<GridThw>{px.grid} == grids_of(f.get("preproc.output.image_grid_thw"));
  rep.add_exact("preproc grid (smart_resize)", grid_ok);
  if (grid_ok)
    rep.add("preproc pixel rows (resized)", px.pixels.cpu(), f.get("preproc.output.pixel_values"), 2e-2);
  else
    rep.add_exact("preproc pixel rows (resized): not compared, the grids differ", false);
}

}  // namespace

VerifyReport verify_qwen3vl_vision_file(const SafeTensors& f, Precision precision, Device device, double tolerance) {
  const Qwen3VlVisionConfig vcfg = detect_qwen3vl_vision_config(f);
  const Qwen3VlTextConfig tcfg = detect_qwen3vl_text_config(f);
  spdlog::info("{}: {}", f.path(), vcfg.summary());
  spdlog::info("{}: {}", f.path(), tcfg.summary());
  const VisionGoldenSetup setup = read_setup(f, vcfg);
  const VisionTokenIds& tok = setup.tok;

  const Qwen3VlTextWeights w = Qwen3VlTextWeights::from_file(std::make_shared<SafeTensors>(f));
  const Qwen3VlVisionModel vision(w, vcfg, Qwen3VlVisionOptions{precision, device});
  const Qwen3VlTextModel text(w, tcfg, -1, Qwen3VlTextOptions{precision, device, nullptr});
  const Tolerances tol(f, precision, tolerance);
  VerifyReport rep;

  // Inputs: our preprocessing of the raw images/video against the file's pixel rows and grids.
  Qwen3VlInputs in;
  const Tensor ids_t = f.get("vl.input.input_ids");
  for (int64_t i = 0; i < ids_t.numel(); ++i) in.ids.push_back(static_cast<int32_t>(ids_t.get(i)));
  in.image_grids = grids_of(f.get("vl.input.image_grid_thw"));
  in.video_grids = grids_of(f.get("vl.input.video_grid_thw"));
  in.image_pixels = f.get("vl.input.pixel_values");
  in.video_pixels = f.get("vl.input.pixel_values_videos");
  check_preprocessing(f, setup.pre, in, rep);
  const Qwen3VlPrepared prep = prepare_qwen3vl(vision, in, tok);
  {
    const Tensor ref = f.get("vl.input.position_ids");
    bool same = ref.numel() == static_cast<int64_t>(prep.positions.size());
    for (int64_t i = 0; same && i < ref.numel(); ++i) same = static_cast<int64_t>(ref.get(i)) == prep.positions[i];
    rep.add_exact("vl mRoPE position_ids (" + f.meta("position_ids_source") + ")", same);
  }
  const std::string out = "vl.output.f64.";
  auto add_vision = [&](const char* which, const Qwen3VlVisionOutputs& o) {
    const std::string wh = which;
    if (!f.has(out + wh + "_embeds")) return;
    rep.add("vl " + wh + "_embeds", o.embeds.cpu(), f.get(out + wh + "_embeds"), tol.of(wh + "_embeds"));
    for (size_t k = 0; k < o.deepstack.size(); ++k)
      rep.add("vl " + wh + "_deepstack." + std::to_string(k), o.deepstack[k].cpu(),
              f.get(out + wh + "_deepstack." + std::to_string(k)), tol.of(wh + "_deepstack." + std::to_string(k)));
  };
  add_vision("image", prep.image);
  add_vision("video", prep.video);

  std::vector<int64_t> keep;
  for (int64_t k = 0; f.has(out + "hidden_states." + std::to_string(k)); ++k) keep.push_back(k);
  auto add_states = [&](const Qwen3VlTextOutputs& hs, const std::string& note) {
    for (int64_t k : keep)
      rep.add("vl text hidden_states." + std::to_string(k) + note, hs.hidden_states.at(k).cpu(),
              f.get(out + "hidden_states." + std::to_string(k)), tol.of("hidden_states." + std::to_string(k)));
  };
  add_states(text.forward(in.ids, keep, false, &prep.positions, prep.extras.rows.empty() ? nullptr : &prep.extras), "");

  // The text tower alone: the same prompt with the reference's own vision rows in place of ours, so that the
  // vision tower's error does not reach the text states (in f64, hidden_states.0 is then the reference's bit
  // for bit).
  // The file's weights are f32-exact, so these lines show the text tower's own flow (docs/notes.md, text64).
  if (!prep.extras.rows.empty()) {
    TextExtras ref_rows = prep.extras;
    ref_rows.embeds = reference_rows(f, out, prep, in, tok, text.dtype(), "image_embeds", "video_embeds");
    for (size_t k = 0; k < ref_rows.deepstack.size(); ++k)
      ref_rows.deepstack[k] =
          reference_rows(f, out, prep, in, tok, text.dtype(), "image_deepstack." + std::to_string(k),
                         "video_deepstack." + std::to_string(k));
    add_states(text.forward(in.ids, keep, false, &prep.positions, &ref_rows), " (reference vision rows)");
  }
  check_processor_case(f, setup.pre, rep);
  return rep;
}

}  // namespace h3

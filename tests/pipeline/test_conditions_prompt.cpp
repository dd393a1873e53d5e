// Keyframes and references in the prompt (pipeline/conditions.h prepare_prompt / encode_prompt): labels,
// vision blocks with the processor's token counts, mRoPE positions, the tower's rows, DeepStack, and the
// packed layout's tags, on the procedural mini text encoder + vision tower and files the tests write.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>

#include "io/procedural.h"
#include "media/mp4_writer.h"
#include "model/dit/layout.h"
#include "model/qwen3vl/procedural.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/tokenizer.h"
#include "model/qwen3vl/vision.h"
#include "model/qwen3vl/weights.h"
#include "model/vae/procedural.h"
#include "pipeline/conditions.h"
#include "pipeline/generator.h"
#include "support/pictures.h"
#include "support/scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using h3::Tensor;

std::string png(const fs::path& dir, const std::string& name, int64_t h, int64_t w, float shift = 0.f) {
  return h3::write_png_frames((dir / (name + "_%d.png")).string(), h3::test::gradient_picture(1, h, w, shift)).at(0);
}

std::string mp4_with_sound(const fs::path& path, int64_t frames, int64_t h, int64_t w) {
  h3::MediaSpec ms;
  ms.width = w;
  ms.height = h;
  ms.fps = 24;
  ms.channels = 2;
  ms.sample_rate = 32000;
  h3::Mp4Writer wr(path.string(), ms);
  wr.add_frames(h3::test::gradient_picture(frames, h, w));
  Tensor s(h3::DType::f32, {2, 16000});
  for (int64_t i = 0; i < s.numel(); ++i) s.data<float>()[i] = static_cast<float>(0.3 * std::sin(0.05 * i));
  wr.add_audio(s);
  wr.finish();
  return path.string();
}

// The procedural mini conditioner: built-in tokenizer, 50-layer text tower and its vision tower (one file).
struct MiniConditioner {
  h3::Tokenizer tok = h3::Tokenizer::from_json_text(h3::builtin_tokenizer_json(), "built-in");
  h3::Qwen3VlTextWeights weights =
      h3::Qwen3VlTextWeights::from_file(h3::procedural_qwen3vl_text_file(h3::kDefaultProceduralSeed));
  h3::Qwen3VlVisionModel vision{weights, h3::detect_qwen3vl_vision_config(weights), h3::Precision::f32};
  h3::Qwen3VlTextModel text{weights, h3::detect_qwen3vl_text_config(weights), 50, h3::Qwen3VlTextOptions{}};
};

MiniConditioner& mini() {
  static MiniConditioner m;
  return m;
}

}  // namespace

TEST(ConditionPrompt, KeyframesBecomeLabelledVisionBlocksWithTheirRowsAndPositions) {
  h3::test::ScratchDir dir;
  h3::GenerateRequest q;
  q.prompt = "a harbour";
  q.width = 384;
  q.height = 256;
  q.first_image = png(dir.path(), "first", 64, 128);
  q.last_image = png(dir.path(), "last", 80, 80, 1.f);
  const h3::ResolvedRequest r = h3::resolve(q);
  MiniConditioner& m = mini();
  const h3::PromptInputs in = h3::prepare_prompt(r, m.tok, &m.vision);

  // Text: labels, one block per keyframe (first, then last) with the processor's token counts, then the
  // prompt. Both keyframes go to the processor on the 384x256 canvas (the reference's MiniMaxH3ResizeStep runs
  // first), which smart_resize keeps (multiples of 32, >= 65,536 pixels): 16x24 patches / 4 = 96 tokens each. (The
  // files' own sizes would give 72 and 64.)
  const int64_t n1 = 96, n2 = 96;
  const auto block = [](int64_t n) {
    std::string s = "<|vision_start|>";
    for (int64_t i = 0; i < n; ++i) s += "<|image_pad|>";
    return s + "<|vision_end|>";
  };
  EXPECT_EQ(in.text, "<Picture 1>: " + block(n1) + "<Picture 2>: " + block(n2) + "a harbour");
  const int64_t label = 13;  // "<Picture 1>: " is 13 byte tokens
  const auto N = static_cast<int64_t>(in.ids.size());
  ASSERT_EQ(N, 2 * label + n1 + n2 + 4 + 9);

  // Vision blocks [start token, end token] as the layout tags them; pad rows carry the tower's rows.
  ASSERT_EQ(in.vision_ranges.size(), 2u);
  EXPECT_EQ(in.vision_ranges[0], (std::pair<int64_t, int64_t>{label, label + n1 + 2}));
  EXPECT_EQ(in.vision_ranges[1], (std::pair<int64_t, int64_t>{2 * label + n1 + 2, 2 * label + n1 + n2 + 4}));
  ASSERT_EQ(static_cast<int64_t>(in.extras.rows.size()), n1 + n2);
  EXPECT_EQ(in.extras.rows.front(), label + 1);
  EXPECT_EQ(in.extras.rows[static_cast<size_t>(n1)], 2 * label + n1 + 3);
  EXPECT_EQ(in.extras.embeds.shape(), (h3::Shape{n1 + n2, 64}));
  ASSERT_EQ(in.extras.deepstack.size(), 3u) << "DeepStack into LM layers 0, 1, 2";

  // mRoPE: text counts on every axis; the first block starts at 14 with (t, row, col); text resumes after the
  // block's larger side (8 x 12 merged tokens -> +12).
  ASSERT_EQ(static_cast<int64_t>(in.positions.size()), 3 * N);
  const int64_t p0 = label + 1;
  EXPECT_EQ(in.positions[p0], p0);
  EXPECT_EQ(in.positions[static_cast<size_t>(p0 + 13)], p0);              // t fixed inside the block
  EXPECT_EQ(in.positions[static_cast<size_t>(N + p0 + 13)], p0 + 1);      // row 1
  EXPECT_EQ(in.positions[static_cast<size_t>(2 * N + p0 + 13)], p0 + 1);  // column 1
  const int64_t end0 = label + n1 + 1;                                    // the block's <|vision_end|>
  EXPECT_EQ(in.positions[static_cast<size_t>(end0)], p0 + 12);

  // The packed layout tags every block row 0 and the rest of the text 1.
  const h3::PackedLayout lay = h3::request_layout(r, h3::text_tags_with_vision(N, in.vision_ranges));
  int64_t zeros = 0;
  for (int64_t i = 0; i < N; ++i) zeros += lay.token_tags[static_cast<size_t>(i)] == 0;
  EXPECT_EQ(zeros, n1 + n2 + 4);
  EXPECT_EQ(lay.token_tags[0], 1);
  EXPECT_EQ(lay.token_tags[static_cast<size_t>(label)], 0);

  // The encoding depends on the pictures: another last keyframe (same size) changes the rows after its block.
  const h3::PromptEncoding a = h3::encode_prompt(in, m.text, 50);
  EXPECT_EQ(a.embeds.shape(), (h3::Shape{N, 64}));
  EXPECT_EQ(a.vision_rows, n1 + n2);
  EXPECT_TRUE(a.warnings.empty());
  h3::GenerateRequest q2 = q;
  q2.last_image = png(dir.path(), "other", 80, 80, 2.5f);
  const h3::PromptInputs in2 = h3::prepare_prompt(h3::resolve(q2), m.tok, &m.vision);
  ASSERT_EQ(in2.ids, in.ids);
  const h3::PromptEncoding b = h3::encode_prompt(in2, m.text, 50);
  const float* pa = a.embeds.data<float>();
  const float* pb = b.embeds.data<float>();
  EXPECT_TRUE(std::equal(pa, pa + (label + n1 + 2) * 64, pb)) << "rows before the changed block are causal";
  EXPECT_FALSE(std::equal(pa + (N - 1) * 64, pa + N * 64, pb + (N - 1) * 64)) << "the last row sees the picture";
}

// Issue 24: a 4000x3000 JPEG as --first ran the vision tower at the file's size (12 MP); the reference's pipeline
// puts the keyframe on the canvas first and the processor sees that. The canvas depends on the keyframe's aspect
// only (resolve_canvas_size), so a 2000x1500 file stands for the 4000x3000 one:
//   4:3   short edge 768 -> 1024 x 768 (786,432 pixels, under the 768 x 1344 cap) -> smart_resize keeps it ->
//         48 x 64 patches -> 768 tokens (the file's own size would give 47 x 62 merged = 2,914);
//   16:9  1365.3 x 768 is over the cap, scaled by sqrt(1,032,192 / 1,048,576) to 1354.6 x 762.0 -> 1344 x 768 ->
//         48 x 84 patches -> 1,008 tokens (h3-model-spec 5: "1344x768 keyframe -> 42x24 = 1008 tokens"; a 1280x720
//         file's own size would give 880).
TEST(ConditionPrompt, KeyframesReachTheProcessorOnTheCanvas) {
  h3::test::ScratchDir dir;
  struct Case {
    int64_t file_h, file_w, canvas_w, canvas_h, tokens;
  };
  for (const Case& c : {Case{1500, 2000, 1024, 768, 768}, Case{720, 1280, 1344, 768, 1008}}) {
    SCOPED_TRACE(testing::Message() << c.file_w << "x" << c.file_h);
    h3::GenerateRequest q;
    q.prompt = "p";
    q.first_image = png(dir.path(), "kf" + std::to_string(c.file_w), c.file_h, c.file_w);
    const h3::ResolvedRequest r = h3::resolve(q);
    EXPECT_EQ(r.width, c.canvas_w);
    EXPECT_EQ(r.height, c.canvas_h);
    MiniConditioner& m = mini();
    const h3::PromptInputs in = h3::prepare_prompt(r, m.tok, &m.vision);
    const int32_t pad = m.tok.token_to_id("<|image_pad|>");
    EXPECT_EQ(std::count(in.ids.begin(), in.ids.end(), pad), c.tokens);
    EXPECT_EQ(static_cast<int64_t>(in.extras.rows.size()), c.tokens);
  }
}

TEST(ConditionPrompt, ReferencesKeepTheirOrderAndVideosGetTimestampsAt2Fps) {
  h3::test::ScratchDir dir;
  h3::GenerateRequest q;
  q.prompt = "p";
  const std::string vid = mp4_with_sound(dir.path() / "v.mp4", 48, 64, 64);
  const std::string img = png(dir.path(), "img", 600, 800);
  const std::string wav = vid;  // its soundtrack as a standalone audio reference
  q.references = {{"video", vid}, {"image", img}, {"audio", wav}};
  // The procedural models' reference sizes (short edges 64, video area 64 x 128), so that the towers stay small.
  h3::ModelLimits lim;
  lim.ref_image_short_edge = 64;
  lim.ref_video_short_edge = 64;
  lim.ref_video_max_pixels = 64 * 128;
  const h3::ResolvedRequest r = h3::resolve(q, lim);
  ASSERT_EQ(r.media.size(), 3u);
  ASSERT_EQ(r.media[0].frames, 39);  // 48 frames snapped down to 17n+5
  MiniConditioner& m = mini();
  const h3::PromptInputs in = h3::prepare_prompt(r, m.tok, &m.vision);
  // 39 frames at 2 fps: 0, 12, 24, 36 -> two temporal patches at (0 + 0.5) / 2 and (1 + 1.5) / 2 seconds;
  // each 64x64 frame (video minimum 4,096 pixels) is 4x4 patches = 4 merged tokens.
  std::string vblock = "<|vision_start|>";
  for (int i = 0; i < 4; ++i) vblock += "<|video_pad|>";
  vblock += "<|vision_end|>";
  // The 800x600 picture reaches the processor at its reference size: short edge 64, the other round(800 * 64 / 600
  // / 32) * 32 = 96; smart_resize lifts 96x64 to the 65,536-pixel minimum: beta = sqrt(65536 / 6144), sides
  // ceil(64 * beta / 32) * 32 = 224 and ceil(96 * beta / 32) * 32 = 320, i.e. 14 x 20 patches = 70 tokens (the file's
  // own 800x600 would give 19 x 25 merged = 475).
  const int64_t n_image = 70;
  std::string iblock = "<|vision_start|>";
  for (int64_t i = 0; i < n_image; ++i) iblock += "<|image_pad|>";
  iblock += "<|vision_end|>";
  EXPECT_EQ(in.text, "<Audio 1>: <Video 1>: <0.2 seconds>" + vblock + "<1.2 seconds>" + vblock +
                         "<Picture 1>: " + iblock + "<Audio 2>: p");
  EXPECT_EQ(in.vision_ranges.size(), 3u) << "one block per temporal patch, one per picture";
  EXPECT_EQ(static_cast<int64_t>(in.extras.rows.size()), 8 + n_image);
  // Each video frame block restarts (t, row, col) from the next free index with t = 0 offset only.
  const auto N = static_cast<int64_t>(in.ids.size());
  const int64_t f0 = in.vision_ranges[0].first + 1, f1 = in.vision_ranges[1].first + 1;
  EXPECT_EQ(in.positions[static_cast<size_t>(f0 + 3)], f0);
  EXPECT_EQ(in.positions[static_cast<size_t>(N + f0 + 3)], f0 + 1);
  EXPECT_EQ(in.positions[static_cast<size_t>(2 * N + f0 + 3)], f0 + 1);
  // After the 2x2 block: its end token (f0 + 2), 13 timestamp tokens, the next start token.
  EXPECT_EQ(in.positions[static_cast<size_t>(f1)], f0 + 2 + 1 + 13 + 1);
}

TEST(ConditionPrompt, TextOnlyAndAudioOnlyPromptsHaveNoVisionRows) {
  h3::GenerateRequest q;
  q.prompt = "plain";
  MiniConditioner& m = mini();
  const h3::PromptInputs t = h3::prepare_prompt(h3::resolve(q), m.tok, nullptr);
  EXPECT_EQ(t.text, "plain");
  EXPECT_TRUE(t.positions.empty());
  EXPECT_TRUE(t.extras.rows.empty());
  // The t2va encoding is the plain hidden state (text positions, no extras).
  EXPECT_EQ(h3::encode_prompt(t, m.text, 50).embeds.to(h3::DType::f32).numel(), 5 * 64);
}

TEST(ConditionPrompt, BadPromptsAndTowersAreRefused) {
  h3::test::ScratchDir dir;
  h3::GenerateRequest q;
  q.prompt = "look <|image_pad|>";
  q.first_image = png(dir.path(), "f", 64, 64);
  const h3::ResolvedRequest r = h3::resolve(q);
  MiniConditioner& m = mini();
  try {
    h3::prepare_prompt(r, m.tok, &m.vision);
    ADD_FAILURE() << "a prompt holding a vision token must be refused";
  } catch (const h3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("remove it from the prompt"), std::string::npos) << e.what();
  }
  q.prompt = "fine";
  try {
    h3::prepare_prompt(h3::resolve(q), m.tok, nullptr);
    ADD_FAILURE() << "pictures without a vision tower must be refused";
  } catch (const h3::Error& e) {
    EXPECT_NE(std::string(e.what()).find("vision tower"), std::string::npos) << e.what();
  }
}

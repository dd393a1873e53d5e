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
#include "scratch_dir.h"

namespace {

namespace fs = std::filesystem;
using h3::Tensor;

Tensor picture(int64_t frames, int64_t h, int64_t w, float shift) {
  Tensor t(h3::DType::f32, {3, frames, h, w});
  float* p = t.data<float>();
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t f = 0; f < frames; ++f)
      for (int64_t y = 0; y < h; ++y)
        for (int64_t x = 0; x < w; ++x)
          p[((c * frames + f) * h + y) * w + x] =
              static_cast<float>(c == 0   ? static_cast<double>(x) / static_cast<double>(w - 1)
                                 : c == 1 ? static_cast<double>(y) / static_cast<double>(h - 1)
                                          : 0.5 + 0.4 * std::sin(0.3 * static_cast<double>(f) + shift));
  return t;
}

std::string png(const fs::path& dir, const std::string& name, int64_t h, int64_t w, float shift = 0.f) {
  return h3::write_png_frames((dir / (name + "_%d.png")).string(), picture(1, h, w, shift)).at(0);
}

std::string mp4_with_sound(const fs::path& path, int64_t frames, int64_t h, int64_t w) {
  h3::MediaSpec ms;
  ms.width = w;
  ms.height = h;
  ms.fps = 24;
  ms.channels = 2;
  ms.sample_rate = 32000;
  h3::Mp4Writer wr(path.string(), ms);
  wr.add_frames(picture(frames, h, w, 0.f));
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

int64_t tokens_of(const h3::GridThw& g) {
  return g[0] * g[1] * g[2] / 4;
}

h3::GridThw image_grid(int64_t h, int64_t w) {
  const auto [rh, rw] = h3::smart_resize(h, w, 32, 65536, 16777216);
  return {1, rh / 16, rw / 16};
}

}  // namespace

TEST(ConditionPrompt, KeyframesBecomeLabelledVisionBlocksWithTheirRowsAndPositions) {
  h3::test::ScratchDir dir;
  h3::GenerateRequest q;
  q.prompt = "a harbour";
  q.first_image = png(dir.path(), "first", 64, 128);
  q.last_image = png(dir.path(), "last", 80, 80, 1.f);
  const h3::ResolvedRequest r = h3::resolve(q);
  MiniConditioner& m = mini();
  const h3::PromptInputs in = h3::prepare_prompt(r, m.tok, &m.vision);

  // Text: labels, one block per keyframe (first, then last) with the processor's token counts, then the
  // prompt.
  const int64_t n1 = tokens_of(image_grid(64, 128)), n2 = tokens_of(image_grid(80, 80));
  EXPECT_EQ(n1, 6 * 12);  // 64x128 -> smart_resize 192x384 (min 65,536 pixels) -> 12x24 patches / 4
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
  // block's larger side (6 x 12 merged tokens -> +12).
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

TEST(ConditionPrompt, ReferencesKeepTheirOrderAndVideosGetTimestampsAt2Fps) {
  h3::test::ScratchDir dir;
  h3::GenerateRequest q;
  q.prompt = "p";
  const std::string vid = mp4_with_sound(dir.path() / "v.mp4", 48, 64, 64);
  const std::string img = png(dir.path(), "img", 48, 64);
  const std::string wav = vid;  // its soundtrack as a standalone audio reference
  q.references = {{"video", vid}, {"image", img}, {"audio", wav}};
  const h3::ResolvedRequest r = h3::resolve(q);
  ASSERT_EQ(r.media.size(), 3u);
  ASSERT_EQ(r.media[0].frames, 39);  // 48 frames snapped down to 17n+5
  MiniConditioner& m = mini();
  const h3::PromptInputs in = h3::prepare_prompt(r, m.tok, &m.vision);
  // 39 frames at 2 fps: 0, 12, 24, 36 -> two temporal patches at (0 + 0.5) / 2 and (1 + 1.5) / 2 seconds;
  // each 64x64 frame (video minimum 4,096 pixels) is 4x4 patches = 4 merged tokens.
  std::string vblock = "<|vision_start|>";
  for (int i = 0; i < 4; ++i) vblock += "<|video_pad|>";
  vblock += "<|vision_end|>";
  std::string iblock = "<|vision_start|>";
  for (int64_t i = 0; i < tokens_of(image_grid(48, 64)); ++i) iblock += "<|image_pad|>";
  iblock += "<|vision_end|>";
  EXPECT_EQ(in.text, "<Audio 1>: <Video 1>: <0.2 seconds>" + vblock + "<1.2 seconds>" + vblock +
                         "<Picture 1>: " + iblock + "<Audio 2>: p");
  EXPECT_EQ(in.vision_ranges.size(), 3u) << "one block per temporal patch, one per picture";
  EXPECT_EQ(static_cast<int64_t>(in.extras.rows.size()), 8 + tokens_of(image_grid(48, 64)));
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

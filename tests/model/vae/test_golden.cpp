// The video and audio VAEs against the reference's tensors in shared/golden, the tile and chunk plans against the
// worked examples of h3-model-spec §6.4/§6.5, and the errors on malformed latents.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"
#include "support/golden.h"
#include "verify/vae.h"

using namespace h3;

namespace {

const char* kVideo = "video-vae-mini.safetensors";
const char* kAudio = "audio-vae-mini.safetensors";

// One VAE's golden file: the check that recognises it, the other VAE's (which must not take it for its own), the
// verification of every case and how many lines that reports.
struct GoldenKind {
  bool (*looks_like)(const SafeTensors&);
  bool (*looks_like_other)(const SafeTensors&);
  VerifyReport (*verify)(const SafeTensors&, Precision);
  size_t lines;
};
const GoldenKind kVideoKind{looks_like_video_vae_golden, looks_like_audio_vae_golden,
                            [](const SafeTensors& f, Precision p) { return verify_video_vae_file(f, p); }, 5};
const GoldenKind kAudioKind{looks_like_audio_vae_golden, looks_like_video_vae_golden,
                            [](const SafeTensors& f, Precision p) { return verify_audio_vae_file(f, p); }, 2};

// `f` is recognised as a golden file of `kind` only, and every case of it verifies within tol at precision p.
void expect_all_within(const SafeTensors& f, const GoldenKind& kind, Precision p, double tol) {
  ASSERT_TRUE(kind.looks_like(f));
  ASSERT_FALSE(kind.looks_like_other(f));
  const VerifyReport r = kind.verify(f, p);
  r.print(stdout);
  ASSERT_EQ(r.lines.size(), kind.lines);
  for (const auto& l : r.lines) {
    EXPECT_LE(l.rel_l2, tol) << l.what;
    EXPECT_TRUE(l.pass) << l.what;
  }
  EXPECT_TRUE(r.pass());
}

VideoVae open_video(const SafeTensors& f, Precision p) {
  return VideoVae(f, "weight.", VideoVaeConfig::from_json_text(f.meta("config"), f.meta("tiling"), f.path()), p);
}
AudioVae open_audio(const SafeTensors& f, Precision p) {
  return AudioVae(f, "weight.", AudioVaeConfig::from_json_text(f.meta("config"), f.path()), p);
}

class VideoVaeGolden : public test::GoldenFileTest {
 protected:
  VideoVaeGolden() : GoldenFileTest(kVideo) {}
};

class AudioVaeGolden : public test::GoldenFileTest {
 protected:
  AudioVaeGolden() : GoldenFileTest(kAudio) {}
};

}  // namespace

// ---- plans (no files needed) ----

TEST(VideoVaeTiles, SpecWorkedExample768) {
  TileAxis a = split_tiles(768, 256, 64, 16);
  EXPECT_EQ(a.starts, (std::vector<int64_t>{0, 160, 336, 512}));
  EXPECT_EQ(a.overlaps, (std::vector<int64_t>{96, 80, 80}));
  EXPECT_EQ(a.lengths, (std::vector<int64_t>{256, 256, 256, 256}));
}

TEST(VideoVaeTiles, SpecWorkedExample1344) {
  TileAxis a = split_tiles(1344, 256, 64, 16);
  EXPECT_EQ(a.starts, (std::vector<int64_t>{0, 176, 352, 528, 704, 896, 1088}));
  EXPECT_EQ(a.overlaps, (std::vector<int64_t>{80, 80, 80, 80, 64, 64}));
}

TEST(VideoVaeTiles, OneTileWhenTheFrameFitsAndCoverageOtherwise) {
  TileAxis one = split_tiles(256, 256, 64, 16);
  EXPECT_EQ(one.starts, (std::vector<int64_t>{0}));
  EXPECT_EQ(one.lengths, (std::vector<int64_t>{256}));
  EXPECT_TRUE(one.overlaps.empty());
  for (int64_t len : {48, 80, 272, 480, 1000, 1344, 2048}) {
    TileAxis a = split_tiles(len, 32 * (len > 100 ? 8 : 1), 8 * (len > 100 ? 8 : 1), 4);
    const int64_t tile = a.lengths[0];
    EXPECT_GE(a.starts.back() + tile, len) << len;
    for (size_t i = 0; i < a.overlaps.size(); ++i) {
      EXPECT_GE(a.overlaps[i], 8 * (len > 100 ? 8 : 1)) << len;
      EXPECT_EQ(a.starts[i + 1], a.starts[i] + tile - a.overlaps[i]) << len;
      EXPECT_EQ(a.starts[i + 1] % 4, 0) << len;
    }
  }
}

TEST(VideoVaeChunks, SpecWorkedExample124Frames) {
  TemporalChunkPlan p = plan_temporal_chunks(37, 17, 3, 4);
  EXPECT_EQ(p.starts, (std::vector<int64_t>{0, 5, 10, 15, 20, 25, 30}));
  for (size_t i = 0; i < p.starts.size(); ++i) EXPECT_EQ(p.chunk_len(i), 7) << i;
  EXPECT_EQ(p.pad_tokens, 0);
  EXPECT_EQ(p.frame_pre_padding, 3);
  EXPECT_EQ(p.frame_overlap, 5);
  EXPECT_EQ(p.chunk_frames, 20);
  EXPECT_EQ(p.out_frames, 124);
}

TEST(VideoVaeChunks, FrameCountsFollowTheEncoderGeometry) {
  // 5n+2 latent frames decode to 17n+5 pixel frames; other lengths are padded and trimmed.
  for (int64_t n = 1; n <= 8; ++n) EXPECT_EQ(plan_temporal_chunks(5 * n + 2, 17, 3, 4).out_frames, 17 * n + 5) << n;
  EXPECT_EQ(plan_temporal_chunks(12, 17, 3, 4).out_frames, 39);  // the golden decode_39x48x80 case
  EXPECT_EQ(plan_temporal_chunks(12, 17, 3, 4).starts, (std::vector<int64_t>{0, 5}));
  EXPECT_EQ(plan_temporal_chunks(12, 17, 3, 4).pad_tokens, 0);
  // 10 latents: 2 repeated latents pad the last chunk; the frames they produce are trimmed again. The first pad
  // latent starts a chunk, so it covers clip % q = 1 frame, the second q = 4 (the reference's rule): 39 - 5.
  const TemporalChunkPlan p10 = plan_temporal_chunks(10, 17, 3, 4);
  EXPECT_EQ(p10.pad_tokens, 2);
  EXPECT_EQ(p10.trim_frames, 5);
  EXPECT_EQ(p10.out_frames, 34);
  EXPECT_THROW(plan_temporal_chunks(2, 17, 3, 4), Error);
}

// ---- golden files ----

// f64: the encode and both decodes at ~4e-16. The decodes need the reference's precision flow: diffusers' ViT
// decoder runs its block and q/k RMSNorms on x.float() even in the f64 run (ops/norm.h, NormRound::f32_in_f64);
// with f64 norms they sat at 3.4e-8 on every pixel (docs/notes.md, 2026-12-01).
TEST_F(VideoVaeGolden, AllCasesF64) {
  expect_all_within(file(), kVideoKind, Precision::f64, 1e-9);
}

TEST_F(VideoVaeGolden, AllCasesF32) {
  expect_all_within(file(), kVideoKind, Precision::f32, 1e-5);
}

TEST_F(VideoVaeGolden, DecodeUnitsAreIndependentAndStitchIsDeterministic) {
  const SafeTensors& f = file();
  VideoVae vae = open_video(f, Precision::f32);
  Tensor z = vae.denormalize(f.get("decode_39x48x80.input.latents_normalized"));
  VideoDecodePlan plan = vae.plan_decode(z.shape());
  EXPECT_EQ(plan.units.size(), 2u * 2u * 3u);  // 2 chunks x 2x3 tiles
  Tensor zp = vae.pad_latents(z, plan);
  // Decode the units in reverse order (as another rank assignment would) and compare with decode().
  std::vector<Tensor> decoded(plan.units.size());
  for (size_t i = plan.units.size(); i-- > 0;) decoded[i] = vae.decode_unit(zp, plan.units[i]);
  Tensor a = vae.stitch(plan, decoded), b = vae.decode(z);
  ASSERT_EQ(a.shape(), b.shape());
  EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
  EXPECT_EQ(a.shape(), (Shape{3, 39, 48, 80}));
  // A padded length (trailing frames trimmed) and a width that is not a whole number of tiles.
  EXPECT_EQ(vae.decode(Tensor(DType::f32, {24, 10, 8, 13})).shape(), (Shape{3, 34, 32, 52}));
}

TEST_F(VideoVaeGolden, BadLatentsThrowClearErrors) {
  const SafeTensors& f = file();
  VideoVae vae = open_video(f, Precision::f32);
  try {
    vae.decode(Tensor(DType::f32, {16, 7, 8, 8}));
    FAIL() << "no error for 16 latent channels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[24, frames, height, width]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(vae.decode(Tensor(DType::f32, {24, 7, 8})), Error);
  EXPECT_THROW(vae.decode(Tensor(DType::f32, {24, 2, 8, 8})), Error);  // too few frames for one chunk
  EXPECT_THROW(vae.encode_mean(Tensor(DType::f32, {4, 17, 32, 32})), Error);
  EXPECT_THROW(vae.encode_mean(Tensor(DType::f32, {3, 17, 30, 32})), Error);
  EXPECT_THROW(VideoVae(f, "weight.", VideoVaeConfig::from_json_text(f.meta("config"), "", f.path()), Precision::bf16),
               Error);
  // A config that does not match the weights names the mis-shaped keys.
  VideoVaeConfig wrong = VideoVaeConfig::from_json_text(f.meta("config"), f.meta("tiling"), f.path());
  wrong.decoder_num_layers = 3;
  try {
    VideoVae v(f, "weight.", wrong, Precision::f32);
    FAIL() << "no error for a missing block";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("transformer_blocks.2"), std::string::npos) << e.what();
  }
}

TEST_F(AudioVaeGolden, AllCasesF64) {
  expect_all_within(file(), kAudioKind, Precision::f64, 1e-9);
}

TEST_F(AudioVaeGolden, AllCasesF32) {
  expect_all_within(file(), kAudioKind, Precision::f32, 1e-5);
}

TEST_F(AudioVaeGolden, ShapesAndBadInputs) {
  AudioVae vae = open_audio(file(), Precision::f32);
  EXPECT_EQ(vae.config().hop(), 8);
  Tensor w = vae.decode(Tensor(DType::f32, {2, 32, 5}));
  EXPECT_EQ(w.shape(), (Shape{2, 1, 40}));
  // 33 samples are right-padded to 40 -> 5 latents.
  EXPECT_EQ(vae.encode_mean(Tensor(DType::f32, {2, 1, 33})).shape(), (Shape{2, 32, 5}));
  try {
    vae.decode(Tensor(DType::f32, {2, 24, 5}));
    FAIL() << "no error for 24 latent channels";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("[batch, 32, frames]"), std::string::npos) << e.what();
  }
  EXPECT_THROW(vae.decode(Tensor(DType::f32, {32, 5})), Error);
  EXPECT_THROW(vae.encode_mean(Tensor(DType::f32, {2, 2, 40})), Error);
}

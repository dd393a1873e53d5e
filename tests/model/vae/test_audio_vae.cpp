// The audio VAE decode split into batch items (AudioVae::decode's max_items, what a tight device budget chooses):
// bitwise the decode of all items at once on the CPU.
#include <gtest/gtest.h>

#include <cstring>

#include "model/vae/audio_vae.h"
#include "support/golden.h"

using namespace h3;

TEST(AudioVaeDecode, ItemsOneAtATimeAreBitwiseTheBatchedDecode) {
  H3_OPEN_GOLDEN(f, "audio-vae-mini.safetensors");
  const AudioVae vae(f, "weight.", AudioVaeConfig::from_json_text(f.meta("config"), f.path()), Precision::f32);
  const Tensor z = f.get("decode.input.latents_denormalized");
  ASSERT_EQ(z.dim(0), 2) << "stereo: two items";
  const Tensor all = vae.decode(z), one = vae.decode(z, 1);
  ASSERT_EQ(one.shape(), all.shape());
  EXPECT_EQ(std::memcmp(one.raw(), all.raw(), all.nbytes()), 0);
  // The two channels differ, so item order matters to the comparison.
  const size_t half = all.nbytes() / 2;
  EXPECT_NE(std::memcmp(all.raw(), static_cast<const std::byte*>(all.raw()) + half, half), 0);
}

TEST(AudioVaeDecode, ItemNeedAtTheReleasedSizes) {
  // decoder_dim 1024 halved per stage, rates 5 5 2 2 2 2 2: channels x samples per latent frame 1024, 2560, 6400 and
  // then 6400 at every stage; 16 f32 buffers of the widest.
  EXPECT_EQ(audio_decoder_item_bytes(AudioVaeConfig{}, 208), int64_t{6400} * 208 * 4 * 16);
}

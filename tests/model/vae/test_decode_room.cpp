// Units per VAE decode call from the room under the device-memory budget (model/vae/decode_room.h): the share of
// the room, at least one unit, at most `most`, `most` when no limit is known, and the refusal naming the need and
// the room when not even one unit fits.
#include <gtest/gtest.h>

#include "core/tensor.h"
#include "model/vae/decode_room.h"
#include "support/error_of.h"

using namespace h3;

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

DecodeRoom room(int64_t budget, int64_t in_use) {
  DecodeRoom r;
  r.budget = budget;
  r.in_use = in_use;
  return r;
}

}  // namespace

TEST(DecodeRoom, UnitsPerCallTakeTheShareOfTheRoomWithinOneAndMost) {
  // 1000 MiB budget, 200 in use: 800 left; half of it for 100 MiB units is 4.
  EXPECT_EQ(decode_units_per_call("video VAE", "unit", 100 * kMiB, room(1000 * kMiB, 200 * kMiB), 0.5, 32), 4);
  EXPECT_EQ(decode_units_per_call("video VAE", "unit", 100 * kMiB, room(1000 * kMiB, 200 * kMiB), 1.0, 32), 8);
  EXPECT_EQ(decode_units_per_call("video VAE", "unit", 100 * kMiB, room(1000 * kMiB, 200 * kMiB), 1.0, 3), 3);
  // The unit fits in the room but not in its share: one at a time.
  EXPECT_EQ(decode_units_per_call("video VAE", "unit", 700 * kMiB, room(1000 * kMiB, 200 * kMiB), 0.5, 32), 1);
  // No limit known (the CPU, a device without a budget): `most`.
  EXPECT_EQ(decode_units_per_call("video VAE", "unit", 100 * kMiB, DecodeRoom{}, 0.5, 32), 32);
  EXPECT_EQ(decode_room(Device::cpu).known(), false);
  EXPECT_EQ(room(100, 300).left(), 0);
}

TEST(DecodeRoom, OneUnitAboveTheRoomIsRefusedNamingNeedAndRoom) {
  const std::string e = test::error_of([] {
    (void)decode_units_per_call("video VAE", "unit of 7x16x16 latents", 900 * kMiB, room(1000 * kMiB, 200 * kMiB), 0.5,
                                32);
  });
  EXPECT_NE(e.find("video VAE decode: one unit of 7x16x16 latents needs"), std::string::npos) << e;
  for (const char* part : {"900", "800", "1000", "200", "--max-device-memory"})
    EXPECT_NE(e.find(part), std::string::npos) << part << " missing in: " << e;
}

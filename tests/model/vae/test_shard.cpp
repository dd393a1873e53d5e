// The balanced assignment of VAE decode units to ranks (model/vae/shard.h): coverage, determinism, the LPT
// balance bound, more ranks than units, the spec's 768p x 124-frame geometry; and the sharded decode on one
// rank.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>

#include "model/vae/shard.h"
#include "support/golden.h"

using namespace h3;

namespace {

// Every unit exactly once, owner[] consistent with units[], lists ascending, loads equal to the summed costs.
void expect_valid(const ShardAssignment& as, const std::vector<int64_t>& costs, int ranks) {
  ASSERT_EQ(as.ranks, ranks);
  ASSERT_EQ(as.units.size(), static_cast<size_t>(ranks));
  ASSERT_EQ(as.load.size(), static_cast<size_t>(ranks));
  ASSERT_EQ(as.owner.size(), costs.size());
  std::vector<int> seen(costs.size(), 0);
  for (int r = 0; r < ranks; ++r) {
    EXPECT_TRUE(std::is_sorted(as.units[r].begin(), as.units[r].end())) << r;
    int64_t load = 0;
    for (int64_t u : as.units[r]) {
      ASSERT_GE(u, 0);
      ASSERT_LT(u, static_cast<int64_t>(costs.size()));
      ++seen[u];
      EXPECT_EQ(as.owner[u], r) << u;
      load += costs[u];
    }
    EXPECT_EQ(load, as.load[r]) << r;
  }
  for (size_t u = 0; u < costs.size(); ++u) EXPECT_EQ(seen[u], 1) << u;
}

int64_t spread(const ShardAssignment& as) {
  const auto [lo, hi] = std::minmax_element(as.load.begin(), as.load.end());
  return *hi - *lo;
}

// The spec's 768 x 1344 x 124-frame decode: 37 latent frames, 48 x 84 latent grid (defaults: ratio 16, tiles
// 256).
VideoDecodePlan plan_768p_124() {
  const VideoVaeConfig cfg{};
  VideoDecodePlan p;
  p.latent_frames = 37;
  p.latent_height = 48;
  p.latent_width = 84;
  p.time = plan_temporal_chunks(37, cfg.clip_length, cfg.token_drop, cfg.temporal_ratio());
  const int64_t r = cfg.spatial_ratio();
  p.rows = split_tiles(768, cfg.tile_height, cfg.tile_overlap_height, r);
  p.cols = split_tiles(1344, cfg.tile_width, cfg.tile_overlap_width, r);
  add_decode_units(p, r);
  return p;
}

}  // namespace

TEST(VaeShardAssign, EveryUnitOnceDeterministicAndBalanced) {
  std::mt19937_64 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t m = 1 + static_cast<int64_t>(rng() % 61);
    const int n = 1 + static_cast<int>(rng() % 13);
    std::vector<int64_t> costs(m);
    for (auto& c : costs) c = 1 + static_cast<int64_t>(rng() % 997);
    const ShardAssignment a = assign_balanced(costs, n), b = assign_balanced(costs, n);
    expect_valid(a, costs, n);
    EXPECT_EQ(a.owner, b.owner);
    EXPECT_EQ(a.units, b.units);
    EXPECT_EQ(a.max_cost, *std::max_element(costs.begin(), costs.end()));
    // The LPT bound: every pair of ranks within the largest unit's cost.
    EXPECT_LE(spread(a), a.max_cost) << "m " << m << " n " << n;
  }
}

TEST(VaeShardAssign, TieBreaksAreByIndexAndLowestRank) {
  // Equal costs deal round-robin in index order.
  const ShardAssignment a = assign_balanced(std::vector<int64_t>(7, 5), 3);
  EXPECT_EQ(a.units[0], (std::vector<int64_t>{0, 3, 6}));
  EXPECT_EQ(a.units[1], (std::vector<int64_t>{1, 4}));
  EXPECT_EQ(a.units[2], (std::vector<int64_t>{2, 5}));
  // Largest first: 9 -> r0, 7 -> r1, 4 (index 1) -> r1 (7 < 9), 4 (index 3) -> r0 (9 < 11), 3 -> r1 (11 <
  // 13).
  const ShardAssignment b = assign_balanced({3, 4, 9, 4, 7}, 2);
  EXPECT_EQ(b.owner, (std::vector<int>{1, 1, 0, 0, 1}));
  EXPECT_EQ(b.load, (std::vector<int64_t>{13, 14}));
}

TEST(VaeShardAssign, MoreRanksThanUnitsLeavesEmptyRanks) {
  const std::vector<int64_t> costs{4, 4};  // the two stereo channels
  for (int n : {1, 2, 3, 5, 8}) {
    const ShardAssignment a = assign_balanced(costs, n);
    expect_valid(a, costs, n);
    if (n == 1)
      EXPECT_EQ(a.units[0], (std::vector<int64_t>{0, 1}));
    else {
      EXPECT_EQ(a.units[0], (std::vector<int64_t>{0}));
      EXPECT_EQ(a.units[1], (std::vector<int64_t>{1}));
      for (int r = 2; r < n; ++r) EXPECT_TRUE(a.units[r].empty()) << r;
    }
  }
  const ShardAssignment none = assign_balanced({}, 4);
  expect_valid(none, {}, 4);
  EXPECT_THROW(assign_balanced({1}, 0), Error);
}

TEST(VaeShardAssign, Spec768p124FramesSplitsEightWaysWithinOneUnit) {
  const VideoDecodePlan p = plan_768p_124();
  ASSERT_EQ(p.time.starts.size(), 7u);
  ASSERT_EQ(p.rows.starts.size(), 4u);
  ASSERT_EQ(p.cols.starts.size(), 7u);
  ASSERT_EQ(p.units.size(), 196u);
  const std::vector<int64_t> costs = video_unit_costs(p);
  for (int64_t c : costs) EXPECT_EQ(c, 7 * 16 * 16);  // every unit: 7 latent frames x a full 16 x 16 tile
  const ShardAssignment a = assign_balanced(costs, 8);
  expect_valid(a, costs, 8);
  for (int r = 0; r < 8; ++r) {
    EXPECT_GE(a.units[r].size(), 24u) << r;
    EXPECT_LE(a.units[r].size(), 25u) << r;
  }
  EXPECT_LE(spread(a), a.max_cost);
}

TEST(VaeShardDecode, OneRankIsBitwiseTheDecode) {
  const auto vfile = test::golden("video-vae-mini.safetensors");
  const auto afile = test::golden("audio-vae-mini.safetensors");
  H3_REQUIRE_GOLDEN(vfile);
  H3_REQUIRE_GOLDEN(afile);
  auto local = make_local_comm();
  {
    SafeTensors f = SafeTensors::open(vfile);
    VideoVae vae(f, "weight.", VideoVaeConfig::from_json_text(f.meta("config"), f.meta("tiling"), f.path()),
                 Precision::f32);
    const Tensor z = vae.denormalize(f.get("decode_39x48x80.input.latents_normalized"));
    ShardDecodeStats st;
    const Tensor a = decode_video_sharded(vae, z, *local, &st), b = vae.decode(z);
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
    EXPECT_EQ(st.units, 12);
  }
  {
    SafeTensors f = SafeTensors::open(afile);
    AudioVae vae(f, "weight.", AudioVaeConfig::from_json_text(f.meta("config"), f.path()), Precision::f32);
    const Tensor z = f.get("decode.input.latents_denormalized");
    ShardDecodeStats st;
    const Tensor a = decode_audio_sharded(vae, z, *local, &st), b = vae.decode(z);
    ASSERT_EQ(a.shape(), b.shape());
    EXPECT_EQ(std::memcmp(a.raw(), b.raw(), a.nbytes()), 0);
    EXPECT_EQ(st.units, 2);
  }
}

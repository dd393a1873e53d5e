// The rank roles (pipeline/rank_roles.h): who denoises, who encodes, where the embeddings come from and who
// broadcasts what, for every group of 1..8 ranks and every encoder count it allows; the refusal of the others.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "pipeline/rank_roles.h"
#include "support/error_of.h"

namespace {

using h3::test::error_of;

std::vector<int> ranks(int from, int to) {  // [from, to)
  std::vector<int> r;
  for (int i = from; i < to; ++i) r.push_back(i);
  return r;
}

}  // namespace

TEST(RankRoles, EveryGroupAndEncoderCount) {
  for (int n = 1; n <= 8; ++n) {
    for (int K = 0; K < n; ++K) {
      SCOPED_TRACE("n " + std::to_string(n) + " K " + std::to_string(K));
      std::vector<int> denoisers, encoders, from_tower, from_rank0;
      for (int rank = 0; rank < n; ++rank) {
        const h3::RankRoles r = h3::rank_roles(n, K, rank);
        EXPECT_EQ(r.n, n);
        EXPECT_EQ(r.K, K);
        EXPECT_EQ(r.rank, rank);
        EXPECT_EQ(r.denoise_ranks(), n - K);
        EXPECT_EQ(r.dedicated_encoders(), K > 0);
        EXPECT_EQ(r.lead(), rank == 0);
        // The encoder root: the first dedicated encoder rank, or rank 0 when every rank encodes.
        EXPECT_EQ(r.encoder_root, K > 0 ? n - K : 0);
        if (r.denoiser) denoisers.push_back(rank);
        if (r.encoder) encoders.push_back(rank);
        if (r.computes_embeddings(false)) from_tower.push_back(rank);
        if (r.computes_embeddings(true)) from_rank0.push_back(rank);
        // Precomputed embeddings come from rank 0; the tower's from the encoder root.
        EXPECT_EQ(r.embeddings_source(true), 0);
        EXPECT_EQ(r.embeddings_source(false), K > 0 ? n - K : 0);
        // Broadcast unless every rank ran the tower; a single rank broadcasts nothing.
        EXPECT_EQ(r.embeddings_broadcast(false), n > 1 && K > 0);
        EXPECT_EQ(r.embeddings_broadcast(true), n > 1);
        // The encoder ranks did not denoise: they receive the final rows.
        EXPECT_EQ(r.final_rows_broadcast(), K > 0);
        EXPECT_EQ(r.denoise_group(), ranks(0, n - K));
        EXPECT_EQ(r.encoder_group(), K > 0 ? ranks(n - K, n) : std::vector<int>{});
      }
      EXPECT_EQ(denoisers, ranks(0, n - K));
      // K = 0: the whole group runs the tower tensor-parallel; K > 0: the last K ranks, and only they.
      EXPECT_EQ(encoders, K > 0 ? ranks(n - K, n) : ranks(0, n));
      EXPECT_EQ(from_tower, encoders);
      // Rank 0 (progress, cancel, the prompt, the write) is always a denoise rank.
      EXPECT_EQ(denoisers.front(), 0);
      // Precomputed embeddings: rank 0 takes them, and the dedicated encoders do nothing.
      EXPECT_EQ(from_rank0, std::vector<int>{0});
    }
  }
}

TEST(RankRoles, ThreeRanksOneEncoder) {
  const h3::RankRoles r0 = h3::rank_roles(3, 1, 0), r1 = h3::rank_roles(3, 1, 1), r2 = h3::rank_roles(3, 1, 2);
  EXPECT_TRUE(r0.denoiser && !r0.encoder);
  EXPECT_TRUE(r1.denoiser && !r1.encoder);
  EXPECT_TRUE(!r2.denoiser && r2.encoder);
  EXPECT_EQ(r0.encoder_root, 2);
  EXPECT_FALSE(r0.computes_embeddings(false));
  EXPECT_TRUE(r2.computes_embeddings(false));
  EXPECT_TRUE(r0.computes_embeddings(true));
  EXPECT_FALSE(r2.computes_embeddings(true));
}

TEST(RankRoles, EncoderCountsWithoutADenoiseRankAreRefused) {
  for (int n = 1; n <= 8; ++n) {
    for (int K : {-1, n, n + 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " K " + std::to_string(K));
      const std::string want = "--encoder-ranks " + std::to_string(K) +
                               " needs at least one denoise rank besides them: use 0 (default) or 1.." +
                               std::to_string(n - 1) + " with " + std::to_string(n) + " ranks";
      EXPECT_EQ(error_of([&] { (void)h3::rank_roles(n, K, 0); }), want);
    }
  }
}

TEST(RankRoles, DitMeshOfTheDenoiseRanks) {
  h3::DistOptions d;
  for (int n = 1; n <= 8; ++n) {
    d.mode = h3::DistMode::ulysses;
    EXPECT_EQ(h3::dit_mesh(d, n), std::make_pair(1, n));
    d.mode = h3::DistMode::ulysses_ag;
    EXPECT_EQ(h3::dit_mesh(d, n), std::make_pair(1, n));
    d.mode = h3::DistMode::tensor;
    EXPECT_EQ(h3::dit_mesh(d, n), std::make_pair(n, 1));
  }
  d.mode = h3::DistMode::hybrid;
  d.tp = 2;
  EXPECT_EQ(h3::dit_mesh(d, 4), std::make_pair(2, 2));
  EXPECT_EQ(h3::dit_mesh(d, 6), std::make_pair(2, 3));
  d.tp = 4;
  EXPECT_EQ(h3::dit_mesh(d, 8), std::make_pair(4, 2));
}

TEST(RankRoles, TextTowerRanksAtMostOnePerKvHead) {
  EXPECT_EQ(h3::text_tp_ranks(3, 0, 2), 2);  // the mini tower: 2 KV heads, the third rank holds nothing
  EXPECT_EQ(h3::text_tp_ranks(3, 2, 8), 2);  // two dedicated encoders
  EXPECT_EQ(h3::text_tp_ranks(8, 0, 8), 8);
  EXPECT_EQ(h3::text_tp_ranks(8, 3, 8), 3);
  EXPECT_EQ(h3::text_tp_ranks(1, 0, 8), 1);
  EXPECT_EQ(h3::text_tp_ranks(4, 0, 0), 1);  // a config without KV heads still runs on one rank
}

// Sharded VAE decode: the video decode's (temporal chunk, spatial tile) units and the audio decode's batch
// items (the two stereo channels) spread over the ranks of a communicator, bitwise identical to the 1-rank
// decode.
//
// Why it is exact: every unit (and every audio item) is decoded independently of all others by the same code
// as on one rank, the decoded tensors travel as raw bytes, and the 1-rank stitch then runs unchanged on the
// reassembled list. No reduction, no reordering of arithmetic.
//
// Assignment rule (computed identically on every rank from the plan alone, so it needs no communication):
//   cost(u) = (t1 - t0) * (y1 - y0) * (x1 - x0)   latent frames x latent tile area ~ tokens of the unit's ViT
//   call; units are taken in order of decreasing cost, ties by increasing unit index (longest-processing-time
//   first); each goes to the rank with the smallest load so far, ties to the lowest rank.
// Greedy LPT keeps max_r load(r) - min_r load(r) <= max_u cost(u) (each step adds at most one unit's cost to
// the least-loaded rank). With equal costs it deals units round-robin: m units over n ranks give
// ceil(m / n) or floor(m / n) each. Ranks beyond the number of units get nothing and still take part in the
// collectives.
//
// Gathered layout (allgatherv in rank order; every rank ends up holding every unit and stitches it, so the
// full decode is returned on every rank):
//   recv      = concat over r = 0..n-1 of concat over u in units[r] (ascending) of flatten(decoded[u]),
//   counts[r] = sum over u in units[r] of numel(u),
//   numel(u)  = C_out * q (t1 - t0) * r_s (y1 - y0) * r_s (x1 - x0),
//   decoded[u] starts at offset(r) + sum of numel(v) over v in units[r], v < u,
//   offset(r) = sum over j < r of counts[j].
// Audio is the same with items b of [B, C, A]: cost(b) = A (equal), numel(b) = A * hop, decoded[b] = item b
// of [B, 1, A * hop]. With 2 items, item b goes to rank b (n >= 2), both to rank 0 on one rank; ranks >= 2
// idle.
#pragma once
#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "distributed/comm.h"
#include "model/vae/audio_vae.h"
#include "model/vae/video_vae.h"

namespace h3 {

struct ShardAssignment {
  int ranks = 0;
  std::vector<int> owner;                   // owner[u] = rank that decodes unit u
  std::vector<std::vector<int64_t>> units;  // units[r] = unit indices of rank r, ascending
  std::vector<int64_t> load;                // load[r] = sum of cost(u) over units[r]
  int64_t max_cost = 0;                     // largest single unit cost (the balance bound)
};

// The rule above. costs[u] >= 0; ranks >= 1 (refused otherwise).
ShardAssignment assign_balanced(const std::vector<int64_t>& costs, int ranks);
// cost(u) of every unit of a video decode plan, indexed like plan.units.
std::vector<int64_t> video_unit_costs(const VideoDecodePlan& plan);

// What one rank did in a sharded decode (for reports; local, not gathered).
struct ShardDecodeStats {
  int64_t units = 0;    // units (or audio items) this rank decoded
  int64_t cost = 0;     // their summed cost
  double decode_s = 0;  // seconds in decode_unit / decode
  double gather_s = 0;  // seconds in the agreement check and allgatherv
  double stitch_s = 0;  // seconds in the stitch / reassembly
};

// VideoVae::decode(z) with the units spread over `comm`; returns the whole decode on every rank. Collective:
// every rank calls it with the same latents.
Tensor decode_video_sharded(const VideoVae& vae, const Tensor& z, Comm& comm, ShardDecodeStats* stats = nullptr);
// AudioVae::decode(latents) with the batch items spread over `comm`; returns [B, 1, A * hop] on every rank.
// Collective like the video decode.
Tensor decode_audio_sharded(const AudioVae& vae, const Tensor& latents, Comm& comm, ShardDecodeStats* stats = nullptr);

}  // namespace h3

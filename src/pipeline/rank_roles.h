// Who does what inside the generator's group `comm` (size n, encoder ranks K = GenerateOptions::encoder_ranks):
//   K = 0: every rank denoises; the text tower runs tensor-parallel over the whole group (model/qwen3vl/text.h:
//          KV-head units, ranks beyond the KV head count hold nothing and receive the output), loaded per request
//          and freed before denoising unless the memory plan keeps it resident. Every rank ends the encode with the
//          embeddings, so nothing is broadcast.
//   K > 0: ranks [0, n-K) denoise, ranks [n-K, n) keep the text tower loaded, tensor-parallel among them;
//          rank n-K broadcasts the embeddings [L, text_dim] (L first, as one i64). Rank 0 of the group is
//          always a denoise rank, so progress and cancellation live there; the encoder ranks follow the per-step
//          control word and receive the final rows by broadcast before the decode.
// Rank 0 also prepares the prompt (tokens, vision rows) and the keyframe / reference rows and broadcasts them, owns
// the precomputed inputs (broadcast: precomputed embeddings then come from rank 0 even when K = 0), and writes the MP4.
// The tower's fold order does not depend on its rank count, so the embeddings (and the latents) are bitwise the
// same for every n and K.
// Every rank decodes (units sharded over the whole group) and ends with the same latents and media; rank 0
// writes.
//
// Pure rules of (n, K, rank): no communicator here (the Generator splits its group by these roles).
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "distributed/plan.h"

namespace h3 {

struct RankRoles {
  int n = 1;     // ranks in the group
  int K = 0;     // dedicated encoder ranks (0: every rank encodes)
  int rank = 0;  // this rank in the group

  bool denoiser = true;  // runs the DiT (ranks [0, n-K))
  bool encoder = true;   // runs the text tower (K = 0: every rank; K > 0: ranks [n-K, n))
  int encoder_root = 0;  // the rank whose embeddings the group takes (n-K; 0 when K = 0)

  int denoise_ranks() const { return n - K; }
  bool dedicated_encoders() const { return K > 0; }
  // The rank that reports progress, reads the cancel flag, prepares the prompt and the condition rows, owns the
  // precomputed inputs and writes the MP4: rank 0, always a denoise rank.
  bool lead() const { return rank == 0; }

  // Where the prompt embeddings come from: rank 0 for precomputed ones, else the encoder root.
  int embeddings_source(bool precomputed) const { return precomputed ? 0 : encoder_root; }
  // Whether this rank computes the embeddings (runs the tower, or takes the precomputed ones).
  bool computes_embeddings(bool precomputed) const {
    return rank == embeddings_source(precomputed) || (!precomputed && encoder);
  }
  // Whether the embeddings are broadcast from embeddings_source: with several ranks, unless every rank ran the
  // tower (K = 0 and not precomputed).
  bool embeddings_broadcast(bool precomputed) const { return n > 1 && (precomputed || K > 0); }
  // Whether the final rows go from rank 0 to the encoder ranks after the denoise (they did not denoise).
  bool final_rows_broadcast() const { return K > 0; }

  // The group's ranks by role, in order.
  std::vector<int> denoise_group() const;
  std::vector<int> encoder_group() const;  // empty when K = 0 (every rank encodes)
};

// The roles of `rank` in a group of n with K encoder ranks. Throws when K leaves no denoise rank (K < 0 or K >= n
// for K > 0), naming --encoder-ranks and the counts allowed.
RankRoles rank_roles(int n, int K, int rank);

// The DiT mesh (K tensor-parallel, U sequence-parallel) of `denoise_ranks` ranks, as DistPlan::make builds it.
std::pair<int, int> dit_mesh(const DistOptions& d, int denoise_ranks);
// The text tower's tensor-parallel degree: its ranks (the K encoder ranks, or all n when K = 0), at most one per KV
// head (text.h's units; the ranks beyond hold nothing).
int text_tp_ranks(int n, int K, int64_t kv_heads);

}  // namespace h3

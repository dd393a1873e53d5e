#include "pipeline/rank_roles.h"

#include <algorithm>

#include "core/error.h"

namespace h3 {

RankRoles rank_roles(int n, int K, int rank) {
  H3_CHECK(K >= 0 && (K == 0 || K < n),
           "--encoder-ranks {} needs at least one denoise rank besides them: use 0 (default) or 1..{} with {} "
           "ranks",
           K, n - 1, n);
  RankRoles r;
  r.n = n;
  r.K = K;
  r.rank = rank;
  r.encoder_root = K > 0 ? n - K : 0;
  r.denoiser = rank < n - K;
  r.encoder = K > 0 ? !r.denoiser : true;  // K = 0: the whole group runs the tower, tensor-parallel
  return r;
}

std::vector<int> RankRoles::denoise_group() const {
  std::vector<int> g;
  for (int r = 0; r < n - K; ++r) g.push_back(r);
  return g;
}

std::vector<int> RankRoles::encoder_group() const {
  std::vector<int> g;
  for (int r = n - K; r < n && K > 0; ++r) g.push_back(r);
  return g;
}

std::pair<int, int> dit_mesh(const DistOptions& d, int denoise_ranks) {
  const int n = denoise_ranks;
  if (d.mode == DistMode::tensor) return {n, 1};
  if (d.mode == DistMode::hybrid) return {d.tp, std::max(1, n / std::max(1, d.tp))};
  return {1, n};
}

int text_tp_ranks(int n, int K, int64_t kv_heads) {
  return static_cast<int>(std::min<int64_t>(K > 0 ? K : n, std::max<int64_t>(kv_heads, 1)));
}

}  // namespace h3

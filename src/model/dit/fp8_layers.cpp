#include "model/dit/fp8_layers.h"

#include <fmt/format.h>

#include <mutex>
#include <set>

#include "core/log.h"
#include "distributed/partition.h"

namespace h3 {

bool fp8_gemm_takes(int64_t m, int64_t k) {
  return m > 0 && k > 0 && m % 16 == 0 && k % 16 == 0;
}

std::string DitFp8Layers::summary() const {
  if (!qkv && !out && !ff_in && !ff_out && kept_bf16.empty()) return "no FP8 GEMMs";
  if (kept_bf16.empty()) return "every block GEMM in FP8";
  std::string kinds, why;
  for (const std::string& s : kept_bf16) {
    kinds += (kinds.empty() ? "" : ", ") + s.substr(0, s.find(' '));
    why += (why.empty() ? "" : "; ") + s;
  }
  return fmt::format("FP8 except {} (kept in bf16: {})", kinds, why);
}

DitFp8Layers dit_fp8_layers(const DitConfig& c, DistMode mode, int K, int U) {
  DitFp8Layers r{true, true, true, true, {}};
  const int heads = c.num_attention_heads;
  const int64_t D = c.attention_head_dim, H = c.hidden_size, F = c.ffn_dim;
  // The first rank whose weight an FP8 GEMM cannot take decides (and names the shape) for its kind.
  auto check = [&](bool& kind, const char* name, int64_t m, int64_t k) {
    if (!kind || fp8_gemm_takes(m, k)) return;
    kind = false;
    r.kept_bf16.push_back(fmt::format("{} [{} x {}]: {} is not a multiple of 16", name, m, k,
                                      m % 16 != 0 ? fmt::format("{} outputs", m) : fmt::format("{} inputs", k)));
  };
  for (int u = 0; u < U; ++u)
    for (int t = 0; t < K; ++t) {
      const Range heads_out = K > 1 ? part_of(heads, K, t) : Range{0, heads};
      const Range heads_qkv = mode == DistMode::ulysses_ag ? part_of(heads, U, u) : heads_out;
      const Range ffn = K > 1 ? part_of(F, K, t) : Range{0, F};
      check(r.qkv, "qkv", heads_qkv.size() * D, H);
      check(r.out, "out", H, heads_out.size() * D);
      check(r.ff_in, "ff_in", 2 * ffn.size(), H);
      check(r.ff_out, "ff_out", H, ffn.size());
    }
  return r;
}

void warn_fp8_layers_once(const DitFp8Layers& layers) {
  static std::mutex reported_mu;
  static std::set<std::string> reported;
  std::lock_guard lock(reported_mu);
  if (!layers.all_fp8() && reported.insert(layers.summary()).second)
    spdlog::warn("DiT precision fp8: {}", layers.summary());
}

}  // namespace h3

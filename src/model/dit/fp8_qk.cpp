#include "model/dit/fp8_qk.h"

#include <algorithm>
#include <cmath>

#include "ops/fp8_bound.h"

namespace h3 {

QkFp8Scale qk_fp8_scale(const Tensor& norm_weight, int64_t head_dim) {
  const Tensor h = norm_weight.cpu().to(DType::f32);
  float m = 0;
  for (int64_t i = 0; i < h.numel(); ++i) m = std::max(m, std::fabs(h.data<float>()[i]));
  const float norm = std::sqrt(static_cast<float>(head_dim)) * m;  // of a normed head, at most
  QkFp8Scale r;
  r.scale = ops::round_up_pow2(std::max(norm * 1.02f / 448.0f * 4.0f, 1e-12f));
  // e4m3 rounds each value by at most 2^-4 of itself, bf16 twice by 2^-9 before it.
  r.norm_bound = norm / r.scale * 1.0625f * 1.004f;
  return r;
}

}  // namespace h3

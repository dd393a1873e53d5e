// FP8 attention's fixed scale for the normed, rotated q or k of a DiT block, from its norm weight alone, and the bound
// on a head's L2 norm in e4m3 units that the scale gives (DitModel::Block; Tensor::head_norm_bound).
//
// A head of x / rms(x) has norm sqrt(D) (at most, with the norm's epsilon); times the weight, at most sqrt(D) max|w|;
// RoPE rotates pairs and keeps it. Mapped onto e4m3's 448 with 2 % for bf16 roundings, times 4 (two binades of e4m3's
// range unused: the same relative precision), rounded up to a power of two (ops/fp8_bound.h: exact to divide by):
// every value fits, and a head's e4m3 norm stays <= ~118, so |q8 . k8| <= ~13,900 and FP8 attention may sum its
// scores in f16 (backend/cuda/attention/wgmma.h). The same on every rank: the quantization does not depend on the
// partition.
#pragma once
#include <cstdint>

#include "core/tensor.h"

namespace h3 {

struct QkFp8Scale {
  float scale = 0;       // value = stored * scale
  float norm_bound = 0;  // of any head of the stored values
};

// From the norm weight (any float dtype, any device: read on the host once, at load).
QkFp8Scale qk_fp8_scale(const Tensor& norm_weight, int64_t head_dim);

}  // namespace h3

// One warp's attention of one query row and head, shared by the plain kernel (attention/simple.cu) and the text
// tower's causal one (attention/causal.cu): lane l holds channels l, l + 32, ... of the row (kPer of them, so
// d <= 32 * kPer); keys 0 .. n_keys - 1 are visited in order with an online softmax in f32, so a row's result depends
// on its keys alone. Index equations (row-major, q/o [rows, q_cols], k/v [rows, kv_cols]):
//   q[i, h*d + c], k[j, kvh*d + c], v[j, kvh*d + c] -> o[i, h*d + c]. Internal to src/backend/cuda.
#pragma once
#include <cfloat>
#include <cstdint>

#include "backend/cuda/device.cuh"

namespace h3::cuda {

template <typename T, int kPer>
__device__ __forceinline__ void warp_attention_row(const T* q, const T* k, const T* v, T* o, int lane, int64_t i,
                                                   int64_t h, int64_t kvh, int64_t q_cols, int64_t kv_cols, int64_t d,
                                                   int64_t n_keys, float scale) {
  float qv[kPer], acc[kPer];
  for (int e = 0; e < kPer; ++e) {
    const int64_t c = lane + 32 * e;
    qv[e] = c < d ? ld(q, i * q_cols + h * d + c) : 0.f;
    acc[e] = 0.f;
  }
  float m = -FLT_MAX, l = 0.f;
  for (int64_t j = 0; j < n_keys; ++j) {
    float dot = 0.f;
    for (int e = 0; e < kPer; ++e) {
      const int64_t c = lane + 32 * e;
      if (c < d) dot += qv[e] * ld(k, j * kv_cols + kvh * d + c);
    }
    const float s = warp_sum(dot) * scale;
    const float m_new = fmaxf(m, s), corr = expf(m - m_new), p = expf(s - m_new);
    l = l * corr + p;
    for (int e = 0; e < kPer; ++e) {
      const int64_t c = lane + 32 * e;
      acc[e] = acc[e] * corr + (c < d ? p * ld(v, j * kv_cols + kvh * d + c) : 0.f);
    }
    m = m_new;
  }
  for (int e = 0; e < kPer; ++e) {
    const int64_t c = lane + 32 * e;
    if (c < d) st(o, i * q_cols + h * d + c, acc[e] / l);
  }
}

}  // namespace h3::cuda

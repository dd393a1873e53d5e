// CPU reference entries of the attention family (ops/attention.h) in f32 and f64: full attention streamed over key
// blocks with an online softmax, causal attention with grouped KV heads, and block-diagonal attention as attention()
// per block. One task owns a head's block of query rows, and each row visits its keys in one order always.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/loops.h"
#include "backend/cpu/ops.h"
#include "core/parallel.h"

namespace h3::cpu {

Tensor attention(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  const int64_t nq = q.dim(0), nk = k.dim(0), cols = q.dim(1), heads = cols / d;
  Tensor out(q.dtype(), {nq, cols});
  constexpr int64_t kQBlock = 32, kKBlock = 256;
  const int64_t q_blocks = (nq + kQBlock - 1) / kQBlock;
  auto run = [&]<typename T>(T) {
    const T* qp = q.data<T>();
    const T* kp = k.data<T>();
    const T* vp = v.data<T>();
    T* op = out.data<T>();
    const T scale = T(1) / std::sqrt(T(d));
    // One task = one head x one block of queries; per query row, keys are visited in the same order always.
    parallel_for(heads * q_blocks, [&](int64_t tb, int64_t te) {
      std::vector<T> s(kKBlock), acc(d);
      for (int64_t task = tb; task < te; ++task) {
        const int64_t h = task / q_blocks, q0 = (task % q_blocks) * kQBlock, q1 = std::min(nq, q0 + kQBlock);
        for (int64_t i = q0; i < q1; ++i) {
          const T* qi = qp + i * cols + h * d;
          T m = -INFINITY, l = 0;
          std::fill(acc.begin(), acc.end(), T(0));
          for (int64_t k0 = 0; k0 < nk; k0 += kKBlock) {
            const int64_t k1 = std::min(nk, k0 + kKBlock);
            T bm = -INFINITY;
            for (int64_t j = k0; j < k1; ++j) {
              const T* kj = kp + j * cols + h * d;
              T dot = 0;
              for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
              s[j - k0] = dot * scale;
              bm = std::max(bm, s[j - k0]);
            }
            const T m_new = std::max(m, bm);
            const T correction = std::exp(m - m_new);
            l *= correction;
            for (int64_t c = 0; c < d; ++c) acc[c] *= correction;
            for (int64_t j = k0; j < k1; ++j) {
              const T p = std::exp(s[j - k0] - m_new);
              l += p;
              const T* vj = vp + j * cols + h * d;
              for (int64_t c = 0; c < d; ++c) acc[c] += p * vj[c];
            }
            m = m_new;
          }
          T* oi = op + i * cols + h * d;
          for (int64_t c = 0; c < d; ++c) oi[c] = acc[c] / l;
        }
      }
    });
  };
  if (nq && nk) {
    if (q.dtype() == DType::f32)
      run(float{});
    else
      run(double{});
  }
  return out;
}

Tensor attention_causal(const Tensor& q, const Tensor& k, const Tensor& v, int64_t d) {
  const int64_t n = q.dim(0), qcols = q.dim(1), kcols = k.dim(1), heads = qcols / d, kv_heads = kcols / d;
  const int64_t group = heads / kv_heads;
  Tensor out(q.dtype(), {n, qcols});
  dispatch(q, [&]<typename T_>(T_) {
    const T_* qp = q.data<T_>();
    const T_* kp = k.data<T_>();
    const T_* vp = v.data<T_>();
    T_* op = out.data<T_>();
    const T_ scale = T_(1) / std::sqrt(T_(d));
    // One task = one (query head, query row): a two-pass softmax over keys 0..i of KV head h / group, in order.
    parallel_for(
        heads * n,
        [&](int64_t tb, int64_t te) {
          std::vector<T_> s(n), acc(d);
          for (int64_t task = tb; task < te; ++task) {
            const int64_t h = task / n, i = task % n, kvh = h / group;
            const T_* qi = qp + i * qcols + h * d;
            T_ m = -INFINITY;
            for (int64_t j = 0; j <= i; ++j) {
              const T_* kj = kp + j * kcols + kvh * d;
              T_ dot = 0;
              for (int64_t c = 0; c < d; ++c) dot += qi[c] * kj[c];
              s[j] = dot * scale;
              m = std::max(m, s[j]);
            }
            T_ l = 0;
            std::fill(acc.begin(), acc.end(), T_(0));
            for (int64_t j = 0; j <= i; ++j) {
              const T_ p = std::exp(s[j] - m);
              l += p;
              const T_* vj = vp + j * kcols + kvh * d;
              for (int64_t c = 0; c < d; ++c) acc[c] += p * vj[c];
            }
            T_* oi = op + i * qcols + h * d;
            for (int64_t c = 0; c < d; ++c) oi[c] = acc[c] / l;
          }
        },
        8);
    return 0;
  });
  return out;
}

Tensor attention_blocks(const Tensor& q, const Tensor& k, const Tensor& v, int64_t head_dim, int64_t blocks) {
  const int64_t n = q.dim(0) / blocks;
  if (blocks == 1) return attention(q, k, v, head_dim);
  Tensor out(q.dtype(), q.shape());
  for (int64_t b = 0; b < blocks; ++b) {
    const Tensor o =
        attention(q.rows(b * n, (b + 1) * n), k.rows(b * n, (b + 1) * n), v.rows(b * n, (b + 1) * n), head_dim);
    std::memcpy(out.rows(b * n, (b + 1) * n).raw(), o.raw(), o.nbytes());
  }
  return out;
}

}  // namespace h3::cpu

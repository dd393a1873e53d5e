// The Qwen3-VL text tower's units and their tensor-parallel fold (model/qwen3vl/text.h gives the picture).
//
// G = n_kv_heads units, P = n_heads / G query heads per unit, D = head_dim, F = intermediate, H = hidden.
// Unit g owns
//   q_proj rows [g*P*D, (g+1)*P*D)      k_proj, v_proj rows [g*D, (g+1)*D)      o_proj columns [g*P*D, (g+1)*P*D)
//   FFN chunk C_g = part_of(F, G, g):   up_proj, gate_proj rows C_g             down_proj columns C_g
// and computes from the replicated normed state h[N, H] the partials
//   A_g = attention_causal(rope(norm(h q_g^T)), rope(norm(h k_g^T)), h v_g^T) o_g^T          [N, H]
//   M_g = swiglu(h [up_g; gate_g]^T) down_g^T                                               [N, H]
// and the residual stream takes x += fold(A), x += fold(M) with fold(P) = (((P_0 + P_1) + P_2) + ... + P_{G-1}).
//
// Over T ranks (rank t owns units U_t = part_of(G, T, t), contiguous, so rank order is unit order), the N*H
// elements are cut into slices E_j = part_of(N*H, T, j). An all-to-all sends rank j, for each own unit u in
// order, P_u[E_j]; rank j then holds P_0[E_j] .. P_{G-1}[E_j] in unit order, folds them left to right exactly as
// one rank does, and an all-gather of the folded slices gives every rank fold(P). Bytes per rank and fold:
// sent |U_t| * N*H (minus its own slice), received G * |E_t| + N*H.
//
// bf16 runs: the partials are the f32 sums of each unit's output projection (ops::linear with Sums::kept), folded in
// f32 and rounded to bf16 once (text.cpp), so the residual takes one rounded projection as in transformers' model. With
// a device communicator (NCCL) the exchange and the fold run on the GPU, else through host memory; the fold is the same
// chain of adds on either side.
#include <cstring>

#include "core/device.h"
#include "model/qwen3vl/text.h"
#include "ops/ops.h"

namespace h3 {

Tensor Qwen3VlTextModel::norm(const Tensor& x, const Tensor& w, int64_t group) const {
  if (dtype_ == DType::f64) return ops::rms_norm(x, &w, group, cfg_.rms_eps, ops::NormRound::f32_in_f64_weight_f64);
  if (dtype_ == DType::bf16) return ops::rms_norm(x, &w, group, cfg_.rms_eps, ops::NormRound::twice);
  return ops::rms_norm(x, &w, group, cfg_.rms_eps);
}

// bf16 (transformers' bf16 model): every projection, the q/k norms, the rotation (q*cos, rotate_half(q)*sin and their
// sum each rounded) and SwiGLU's silu(gate) and product are rounded to bf16; the output projections of a unit keep
// their f32 sums (Sums::kept) so that the fold rounds the whole projection once.
Tensor Qwen3VlTextModel::attention_partial(const Unit& u, const Tensor& h, const Layer& L, const Tensor& cos,
                                           const Tensor& sin) const {
  const int64_t D = cfg_.head_dim;
  const bool bf = dtype_ == DType::bf16;
  const Tensor q = ops::rope(norm(ops::linear(h, u.q), L.q_norm, D), cos, sin, D, bf);
  const Tensor k = ops::rope(norm(ops::linear(h, u.k), L.k_norm, D), cos, sin, D, bf);
  const Tensor v = ops::linear(h, u.v);
  const Tensor a = ops::attention_causal(q, k, v, D);
  return bf ? ops::linear(a, u.o, nullptr, ops::Sums::kept) : ops::linear(a, u.o);
}

Tensor Qwen3VlTextModel::mlp_partial(const Unit& u, const Tensor& h) const {
  const bool bf = dtype_ == DType::bf16;
  const Tensor s = ops::swiglu(ops::linear(h, u.up_gate), bf);
  return bf ? ops::linear(s, u.down, nullptr, ops::Sums::kept) : ops::linear(s, u.down);
}

Tensor Qwen3VlTextModel::fold_units(const std::vector<Tensor>& partials, const std::string& what) const {
  H3_ASSERT(!partials.empty() && static_cast<int64_t>(partials.size()) == units_.size(),
            "Qwen3-VL text: {} partials for units [{}, {})", partials.size(), units_.begin, units_.end);
  if (tp_size_ == 1) {
    Tensor acc = partials[0];
    for (size_t i = 1; i < partials.size(); ++i) acc = ops::add(acc, partials[i]);
    return acc;
  }
  Comm& comm = tp_comm_ ? *tp_comm_ : *comm_;
  const int T = tp_size_, me = tp_rank_;
  const Shape shape = partials[0].shape();
  const DType dt = partials[0].dtype();  // the accumulator dtype (f32 for bf16 runs)
  const int64_t count = partials[0].numel();
  const int64_t G = cfg_.n_kv_heads;
  const size_t es = dtype_size(dt);
  std::vector<Range> slices;
  for (int j = 0; j < T; ++j) slices.push_back(part_of(count, T, j));
  const int64_t own = units_.size();
  const int64_t mine = slices[static_cast<size_t>(me)].size();
  std::vector<int64_t> send_counts(T), recv_counts(T);
  for (int j = 0; j < T; ++j) {
    send_counts[static_cast<size_t>(j)] = own * slices[static_cast<size_t>(j)].size();
    recv_counts[static_cast<size_t>(j)] = unit_parts_[static_cast<size_t>(j)].size() * mine;
  }

  // Device buffers through a device communicator (NCCL): the exchange and the fold stay on the GPU; the fold is the
  // same chain of f32 (or f64) adds as on the host, so both give the same bits.
  if (device_ != Device::cpu && comm.device_memory()) {
    Tensor send = Tensor::empty(dt, {own * count}, device_);
    size_t at = 0;
    for (int j = 0; j < T; ++j) {
      const Range& e = slices[static_cast<size_t>(j)];
      for (const auto& p : partials) {
        device_hooks().copy(static_cast<std::byte*>(send.raw()) + at, true,
                            static_cast<const std::byte*>(p.raw()) + e.begin * es, true, e.size() * es);
        at += e.size() * es;
      }
    }
    Tensor recv = Tensor::empty(dt, {G, mine}, device_);
    comm.alltoallv(send.raw(), send_counts, recv.raw(), recv_counts, dt, "all-to-all unit partials (" + what + ")");
    Tensor acc = recv.rows(0, 1).reshape({mine});
    for (int64_t u = 1; u < G; ++u) acc = ops::add(acc, recv.rows(u, u + 1).reshape({mine}));
    Tensor sum = Tensor::empty(dt, shape, device_);
    comm.allgatherv(acc.raw(), sum.raw(), part_sizes(slices), dt, "all-gather folded partials (" + what + ")");
    return sum;
  }

  // Send side: for destination j, own units in order, each unit's slice E_j.
  std::vector<Tensor> host;
  for (const auto& p : partials) host.push_back(p.cpu());
  std::vector<std::byte> send(static_cast<size_t>(own * count) * es);
  size_t at = 0;
  for (int j = 0; j < T; ++j) {
    const Range& e = slices[static_cast<size_t>(j)];
    for (const auto& p : host) {
      std::memcpy(send.data() + at, static_cast<const std::byte*>(p.raw()) + e.begin * es, e.size() * es);
      at += e.size() * es;
    }
  }
  std::vector<std::byte> recv(static_cast<size_t>(G * mine) * es);
  comm.alltoallv(send.data(), send_counts, recv.data(), recv_counts, dt, "all-to-all unit partials (" + what + ")");

  // Fold in unit order (the received blocks are units 0..G-1).
  std::vector<std::byte> folded(static_cast<size_t>(mine) * es);
  auto fold = [&]<typename T_>(T_) {
    const T_* r = reinterpret_cast<const T_*>(recv.data());
    T_* o = reinterpret_cast<T_*>(folded.data());
    for (int64_t i = 0; i < mine; ++i) {
      T_ acc = r[i];
      for (int64_t u = 1; u < G; ++u) acc = acc + r[u * mine + i];
      o[i] = acc;
    }
  };
  if (dt == DType::f64)
    fold(double{});
  else
    fold(float{});
  Tensor sum(dt, shape);
  comm.allgatherv(folded.data(), sum.raw(), part_sizes(slices), dt, "all-gather folded partials (" + what + ")");
  return device_ == Device::cpu ? sum : sum.to_device(device_);
}

}  // namespace h3

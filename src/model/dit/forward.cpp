// The DiT forward under a DistPlan (distributed/plan.h describes the modes). One code path for every world size: with a
// single rank every exchange is a no-op copy, so the 1-rank numbers are the reference the others must reproduce.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

#include "core/hash.h"
#include "core/log.h"
#include "core/profile.h"
#include "distributed/control.h"
#include "distributed/host_stage.h"
#include "model/dit/dit.h"
#include "model/dit/exchange.h"
#include "model/dit/hooks.h"
#include "model/dit/streaming.h"
#include "ops/ops.h"

namespace h3 {

struct DitModel::Step {
  int64_t S = 0, M = 0;
  std::vector<Range> rows;        // packed rows of each world rank
  Range own;                      // this rank's rows
  std::vector<Range> group_rows;  // rows of each sequence-parallel member's row group G_u
  std::vector<Range> tp_rows;     // rows of each member of this rank's tensor-parallel group
  std::vector<Range> heads_sp;    // the tensor-parallel head slice split over the sequence-parallel members
  Tensor cos, sin;                // RoPE tables for the rows attention projects (G_u, or all rows in ulysses-ag)
  Tensor ada_idx;                 // i32, own rows: timestep_index * 3 + tag
  Tensor ada_in;                  // the shared AdaLN input [M, H] (the silu of the time MLP's output)
  std::vector<Tensor> tables;     // every block's modulation table [M, 18H]
};

namespace {

Tensor index_i32(const std::vector<int32_t>& v) {
  return Tensor::from(v, {static_cast<int64_t>(v.size())});
}

// The MPI communicator moves host memory: device tensors travel through a host copy and come back to the device
// they started on. A device communicator (NCCL) takes them where they are.
Tensor host_side(const Tensor& t) {
  return t.on_device() ? t.cpu() : t;
}
Tensor for_comm(const Comm& c, const Tensor& t) {
  return c.device_memory() ? t : host_side(t);
}
Tensor back_to(const Tensor& t, Device d) {
  return t.device() == d ? t : t.to_device(d);
}

// The send and the receive side of an exchange of `t` over `comm` (the receive side of `shape`): a device tensor
// over a host-memory communicator goes through `stage`'s kept buffers, anything else travels where it is.
std::pair<Tensor, Tensor> exchange_sides(const Comm& comm, HostStage& stage, const Tensor& t, const Shape& shape) {
  if (t.on_device() && !comm.device_memory()) return {stage.copy_in(0, t), stage.view(1, t.dtype(), shape)};
  return {t, Tensor(t.dtype(), shape, t.device())};
}

// Gathers row blocks from every member of `comm` (member j holds rows of `blocks[j]`), in order.
Tensor gather_rows_from(Comm& comm, HostStage& stage, const Tensor& mine, const std::vector<Range>& blocks,
                        const std::string& what) {
  const int64_t w = mine.numel() / std::max<int64_t>(mine.dim(0), 1);
  const int64_t width = mine.ndim() == 2 ? mine.dim(1) : w;
  if (comm.size() == 1) return mine;
  profile::Region r("tensor exchange");
  std::vector<int64_t> counts;
  int64_t rows = 0;
  for (const auto& b : blocks) {
    counts.push_back(b.size() * width);
    rows += b.size();
  }
  const auto [src, out] = exchange_sides(comm, stage, mine, {rows, width});
  comm.allgatherv(src.raw(), out.raw(), counts, mine.dtype(), what);
  return back_to(out, mine.device());
}

// Sums each member's partial [sum |blocks|, W] and returns this member's rows (sum in member order).
Tensor reduce_rows_to(Comm& comm, HostStage& stage, const Tensor& partial, const std::vector<Range>& blocks,
                      const std::string& what) {
  if (comm.size() == 1) return partial;
  profile::Region r("tensor exchange");
  const int64_t width = partial.dim(1);
  std::vector<int64_t> counts;
  for (const auto& b : blocks) counts.push_back(b.size() * width);
  const auto [src, out] = exchange_sides(comm, stage, partial, {blocks[comm.rank()].size(), width});
  comm.reduce_scatterv(src.raw(), counts, out.raw(), partial.dtype(), what);
  return back_to(out, partial.device());
}

// Whether src takes every row of a tensor of n rows in order (one rank: no gather needed).
bool all_rows(const std::vector<int32_t>& src, int64_t n) {
  if (static_cast<int64_t>(src.size()) != n) return false;
  for (size_t i = 0; i < src.size(); ++i)
    if (src[i] != static_cast<int32_t>(i)) return false;
  return true;
}

// The entries of `packed_idx` that fall in `own`: src = their positions in the index, dst = their rows within
// `own`.
std::pair<std::vector<int32_t>, std::vector<int32_t>> scatter_own(const Tensor& packed_idx, const Range& own) {
  std::vector<int32_t> src, dst;
  const std::vector<int64_t> rows = index_values(packed_idx);
  for (size_t i = 0; i < rows.size(); ++i) {
    if (rows[i] >= own.begin && rows[i] < own.end) {
      src.push_back(static_cast<int32_t>(i));
      dst.push_back(static_cast<int32_t>(rows[i] - own.begin));
    }
  }
  return std::pair{src, dst};
}

}  // namespace

Tensor DitModel::refiner_attention(const Block& b, const Tensor& h) const {
  const int64_t D = config_.attention_head_dim;
  Tensor q = round_if_bf16(ops::rms_norm(round_if_bf16(ops::linear(h, b.to_q)), &b.norm_q, D, config_.qk_norm_eps));
  Tensor k = round_if_bf16(ops::rms_norm(round_if_bf16(ops::linear(h, b.to_k)), &b.norm_k, D, config_.qk_norm_eps));
  Tensor v = round_if_bf16(ops::linear(h, b.to_v));
  return round_if_bf16(ops::linear(round_if_bf16(ops::attention(q, k, v, D)), b.to_out));
}

Tensor DitModel::refiner_mlp(const Block& b, const Tensor& h) const {
  Tensor u, g;
  {
    profile::Region r("mlp fc1");
    u = round_if_bf16(ops::linear(h, b.ff_in));
  }
  {
    // An FP8 second projection takes its input quantized per row straight from the SwiGLU pass (its GEMM with
    // cuBLASLt's per-row scales): on the H200 that saved 3.1 ms at 480p and 4.9 ms at 768p a forward against a
    // per-tensor scale, whose second pass over the bf16 result costs more than its GEMM saves.
    profile::Region r("mlp swiglu");
    const bool fp8 = b.ff_out.dtype() == DType::fp8_e4m3 && u.on_device();
    g = fp8 ? ops::swiglu_fp8_rows(u, bf16_steps()) : ops::swiglu(u, bf16_steps());
  }
  profile::Region r("mlp fc2");
  return round_if_bf16(ops::linear(g, b.ff_out));
}

// q/k/v for `rows` of the hidden state h, the rank's qkv heads: projection, per-head norm, RoPE.
Tensor DitModel::attention_block(const Block& b, const Tensor& h, Step& st) const {
  const int64_t D = config_.attention_head_dim;
  const bool bf = bf16_steps();
  Comm& sp = *plan_.sp_comm;
  const bool ag = plan_.mode == DistMode::ulysses_ag;
  // Rows the projections see: all rows (ulysses-ag), the row group G_u (tensor-parallel gather), or own rows.
  Tensor hin = ag ? gather_rows_from(sp, *stage_, h, st.rows, "all-gather hidden (ulysses-ag)")
                  : gather_rows_from(*plan_.tp_comm, *stage_, h, st.tp_rows, "all-gather hidden (tensor)");
  // FP8: q, k and v project the same rows, so quantize them once (unless the projections stay in bf16,
  // model/dit/fp8_layers.h).
  if (precision_ == Precision::fp8 && hin.on_device() && hin.dtype() != DType::fp8_e4m3 &&
      b.to_q.dtype() == DType::fp8_e4m3)
    hin = numerics_.fp8_row_scales() ? ops::quantize_fp8_rows(hin) : ops::quantize_fp8(hin);
  // FP8 attention, unless numerics_.fp8_attention is off: q and k quantized with the block's fixed scales (fused
  // into the norm+RoPE pass when attention runs on this rank's projections), v per tensor. Not in deterministic
  // mode: v's per-tensor scale depends on the rows or heads a rank holds, so attention stays bf16 there and FP8 runs
  // stay bitwise across world sizes (every other FP8 scale is per row or fixed).
  const bool fp8_attention = precision_ == Precision::fp8 && hin.on_device() && !numerics_.deterministic &&
                             b.q8_scale.defined() && numerics_.fp8_attention != Fp8Attention::off;
  const bool fused_fp8_qk = fp8_attention && (ag || plan_.U == 1);
  auto project = [&](const Tensor& w, const Tensor* norm, const Tensor* fp8_scale, float norm_bound) {
    Tensor x;
    {
      profile::Region r("qkv");
      x = round_if_bf16(ops::linear(hin, w));
    }
    if (!norm) return x;
    profile::Region r("qk norm+rope");
    if (fused_fp8_qk)  // the fixed scale bounds each head's norm (DitModel::Block): attention may sum in f16
      return ops::qk_norm_rope_fp8(x, *norm, D, config_.qk_norm_eps, st.cos, st.sin, bf, *fp8_scale)
          .with_head_norm_bound(norm_bound);
    return ops::qk_norm_rope(x, *norm, D, config_.qk_norm_eps, st.cos, st.sin, bf);
  };
  auto attend = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    if (fp8_attention) {
      // O stays in fp8 for an FP8 output projection on this rank's rows (no exchange after attention); v then goes
      // in as bf16 and is quantized inside (fused into V's transpose where our kernel runs: the same bits).
      const bool o8 = plan_.U == 1 && !ag && b.to_out.dtype() == DType::fp8_e4m3;
      Tensor q8 = q, k8 = k, v8 = v;
      {
        profile::Region r("quantize q/k/v");
        if (q.dtype() != DType::fp8_e4m3) q8 = ops::quantize_fp8(q), k8 = ops::quantize_fp8(k);
        if (!o8) v8 = ops::quantize_fp8(v);
      }
      profile::Region r("attention");
      if (o8) return ops::attention_fp8_out(q8, k8, v, D);
      return ops::attention(q8, k8, v8, D);
    }
    profile::Region r("attention");
    return round_if_bf16(ops::attention(q, k, v, D));
  };
  Tensor o;
  if (ag || plan_.U == 1) {
    Tensor q = project(b.to_q, &b.norm_q, &b.q8_scale, b.q8_norm_bound),
           k = project(b.to_k, &b.norm_k, &b.k8_scale, b.k8_norm_bound), v = project(b.to_v, nullptr, nullptr, 0);
    o = attend(q, k, v);
  } else {
    // Each projection travels while the next is computed.
    const int64_t h0 = heads_qkv_.begin;
    HeadExchange xq(sp, st.group_rows, st.heads_sp, h0, D, plan_.chunks, "all-to-all q (seq->head)");
    HeadExchange xk(sp, st.group_rows, st.heads_sp, h0, D, plan_.chunks, "all-to-all k (seq->head)");
    HeadExchange xv(sp, st.group_rows, st.heads_sp, h0, D, plan_.chunks, "all-to-all v (seq->head)");
    xq.start_seq_to_head(for_comm(sp, project(b.to_q, &b.norm_q, nullptr, 0)));
    xk.start_seq_to_head(for_comm(sp, project(b.to_k, &b.norm_k, nullptr, 0)));
    xv.start_seq_to_head(for_comm(sp, project(b.to_v, nullptr, nullptr, 0)));
    Tensor q, k, v;
    {
      profile::Region r("exchange");
      q = back_to(xq.finish(), dev_), k = back_to(xk.finish(), dev_), v = back_to(xv.finish(), dev_);
    }
    o = attend(q, k, v);
  }
  if (ag || plan_.U > 1) {
    // Back to this rank's rows (or row group) with every head of the slice.
    const std::vector<Range>& blocks = ag ? st.rows : st.group_rows;
    const int64_t h0 = ag ? 0 : heads_qkv_.begin;
    HeadExchange back(sp, blocks, st.heads_sp, h0, D, plan_.chunks, "all-to-all attention out (head->seq)");
    profile::Region r("exchange");
    back.start_head_to_seq(for_comm(sp, o));
    o = back_to(back.finish(), dev_);
  }
  Tensor partial;
  {
    profile::Region r("out");
    partial = round_if_bf16(ops::linear(o, b.to_out));
  }
  if (ag) return partial;
  return round_if_bf16(
      reduce_rows_to(*plan_.tp_comm, *stage_, partial, st.tp_rows, "reduce-scatter attention out (tensor)"));
}

Tensor DitModel::mlp_block(const Block& b, const Tensor& h, Step& st) const {
  if (plan_.K == 1) return refiner_mlp(b, h);
  Tensor hin = gather_rows_from(*plan_.tp_comm, *stage_, h, st.tp_rows, "all-gather hidden before MLP (tensor)");
  Tensor partial = refiner_mlp(b, hin);
  return round_if_bf16(reduce_rows_to(*plan_.tp_comm, *stage_, partial, st.tp_rows, "reduce-scatter MLP out (tensor)"));
}

// The six modulation tables of every resident block for this forward: each rank projects its rows A_t of the AdaLN
// weights, then one all-gather over the tensor-parallel group assembles all blocks at once. A streamed block's
// table comes when its weights do (block_table, model/dit/streaming.cpp).
std::vector<Tensor> DitModel::adaln_tables(const Tensor& ada_in) const {
  std::vector<Tensor> own(blocks_.size());
  for (size_t n = 0; n < blocks_.size(); ++n)
    if (!block_streamed(n)) own[n] = round_if_bf16(ops::linear(ada_in, blocks_[n].adaln_w, &blocks_[n].adaln_b));
  if (plan_.K == 1) return own;
  return gather_tables(own);
}

// Full tables [M, 18H] from each rank's rows A_t of them: the defined entries of `own` in one all-gather over the
// tensor-parallel group (undefined entries stay undefined; the same entries on every rank).
std::vector<Tensor> DitModel::gather_tables(const std::vector<Tensor>& own) const {
  std::vector<size_t> blocks;
  for (size_t n = 0; n < own.size(); ++n)
    if (own[n].defined() && own[n].numel() > 0) blocks.push_back(n);
  std::vector<Tensor> full(own.size());
  if (blocks.empty()) return full;
  const int64_t M = own[blocks.front()].dim(0), H = config_.hidden_size, nb = static_cast<int64_t>(blocks.size());
  const int64_t a = ada_rows_.size();
  const DType tt = dev_ == Device::cpu ? ct_ : DType::bf16;  // the tables' dtype
  Tensor mine(tt, {nb, M, a});
  for (int64_t n = 0; n < nb; ++n) {
    Tensor s = host_side(own[blocks[n]]);
    std::memcpy(static_cast<std::byte*>(mine.raw()) + n * s.nbytes(), s.raw(), s.nbytes());
  }
  Comm& tp = *plan_.tp_comm;
  std::vector<Range> parts;
  std::vector<int64_t> counts;
  int64_t total = 0;
  for (int j = 0; j < tp.size(); ++j) {
    parts.push_back(part_of(18 * H, plan_.K, j));
    counts.push_back(nb * M * parts.back().size());
    total += counts.back();
  }
  Tensor all(tt, {total});
  tp.allgatherv(mine.raw(), all.raw(), counts, tt, "all-gather AdaLN tables (tensor)");
  const size_t es = dtype_size(tt);
  const auto* src = static_cast<const std::byte*>(all.raw());
  for (int64_t n = 0; n < nb; ++n) full[blocks[n]] = Tensor(tt, Shape{M, 18 * H});
  for (int j = 0; j < tp.size(); ++j) {
    const int64_t w = parts[j].size();
    for (int64_t n = 0; n < nb; ++n)
      for (int64_t m = 0; m < M; ++m, src += w * es)
        std::memcpy(static_cast<std::byte*>(full[blocks[n]].raw()) + (m * 18 * H + parts[j].begin) * es, src, w * es);
  }
  for (size_t n : blocks) full[n] = back_to(full[n], dev_);
  return full;
}

Tensor DitModel::device_index(const std::vector<int32_t>& v) const {
  if (dev_ == Device::cpu) return index_i32(v);
  const uint64_t key = fnv1a_words(v.data(), v.size() * sizeof(int32_t)) ^ static_cast<uint64_t>(v.size());
  auto it = index_cache_.find(key);
  if (it != index_cache_.end() && it->second.host == v) return it->second.dev;
  if (index_cache_.size() >= 64) index_cache_.clear();  // a new request's layout: the old entries go
  Tensor dev = index_i32(v).to_device(dev_);
  index_cache_[key] = CachedIndex{v, dev};
  return dev;
}

DitOutputs DitModel::forward(const DitInputs& in, bool keep) const {
  return forward(in, keep ? DitCapture::all() : DitCapture{});
}

DitOutputs DitModel::forward(const DitInputs& in, const DitCapture& capture) const {
  Step st;
  DitOutputs out;
  prepare_step(in, st);
  Tensor x = prologue(in, st, capture, out);
  const Tensor h = run_blocks(std::move(x), st, capture, out);
  profile::Region heads_region("output heads");
  out.video = output_head(h, in.video_indices, proj_out_w_, proj_out_b_, st);
  out.audio = output_head(h, in.audio_indices, audio_out_w_, audio_out_b_, st);
  return out;
}

// Agreement between ranks, the row partition of this forward, and the RoPE tables of the rows attention projects.
void DitModel::prepare_step(const DitInputs& in, Step& st) const {
  profile::Region setup("setup (inputs, rope)");
  in.validate(config_);
  const bool bf = bf16_steps();
  // All ranks must be running the same forward on the same shapes before any tensor moves.
  agree(*plan_.world_comm, ++op_id_,
        shape_hash(fmt::format("{} {} {} {} {} {}{}", in.video.describe(), in.audio.describe(), in.text.describe(),
                               in.timestep.describe(), in.seq_len(), precision_name(precision_),
                               // ranks streaming different blocks would issue the tables' gathers differently
                               streamer_ ? fmt::format(" resident {}", resident_blocks()) : "")),
        "DiT forward");
  st.S = in.seq_len();
  st.M = in.timestep.numel();
  st.rows = partition(st.S, plan_.world, "packed rows");
  st.own = st.rows[plan_.rank];
  for (int u = 0; u < plan_.U; ++u)
    st.group_rows.push_back({st.rows[u * plan_.K].begin, st.rows[u * plan_.K + plan_.K - 1].end});
  for (int t = 0; t < plan_.K; ++t) st.tp_rows.push_back(st.rows[plan_.u * plan_.K + t]);
  {
    const Range slice = plan_.mode == DistMode::ulysses_ag ? Range{0, config_.num_attention_heads} : heads_qkv_;
    for (int u = 0; u < plan_.U; ++u) {
      Range p = part_of(slice.size(), plan_.U, u);
      st.heads_sp.push_back({slice.begin + p.begin, slice.begin + p.end});
    }
  }
  const Range att_rows = plan_.mode == DistMode::ulysses_ag ? Range{0, st.S} : st.group_rows[plan_.u];
  // Every step of a request has the same positions: the tables are built once and kept while they match.
  const Tensor pos = in.position_ids.rows(att_rows.begin, att_rows.end);
  const uint64_t rope_key = fnv1a_words(pos.raw(), pos.nbytes()) ^ static_cast<uint64_t>(pos.numel());
  if (rope_key != rope_key_ || !rope_cos_.defined() || rope_cos_.dim(0) != pos.dim(0)) {
    rope_tables(pos, config_, ct_, st.cos, st.sin);
    if (dev_ != Device::cpu) {
      st.cos = st.cos.to_device(dev_).to(DType::bf16);
      st.sin = st.sin.to_device(dev_).to(DType::bf16);
    } else if (bf) {
      ops::round_bf16_(st.cos);
      ops::round_bf16_(st.sin);
    }
    rope_key_ = rope_key;
    rope_cos_ = st.cos;
    rope_sin_ = st.sin;
  }
  st.cos = rope_cos_;
  st.sin = rope_sin_;
}

// Prologue: only the rows this rank owns (the refiner needs every text row, so text owners run it whole). Returns
// the residual stream of the own rows; fills the step's AdaLN input, tables and modulation index.
Tensor DitModel::prologue(const DitInputs& in, Step& st, const DitCapture& capture, DitOutputs& out) const {
  const int64_t H = config_.hidden_size;
  const DType act = dev_ == Device::cpu ? ct_ : DType::bf16;  // the residual stream's dtype
  Tensor x(act, {st.own.size(), H}, dev_);
  {
    auto [src, dst] = scatter_own(in.text_indices, st.own);
    const bool keep = capture.wants("token_refiner");
    if (!src.empty() || (keep && plan_.rank == 0)) {
      Tensor text = round_if_bf16(ops::linear(round_if_bf16(upload(in.text)), ctx_w, &ctx_b));
      for (const auto& blk : refiner_) {
        Tensor h = round_if_bf16(ops::rms_norm(text, &blk.norm1, H, config_.norm_eps));
        text = round_if_bf16(ops::add(text, refiner_attention(blk, h)));
        h = round_if_bf16(ops::rms_norm(text, &blk.norm2, H, config_.norm_eps));
        text = round_if_bf16(ops::add(text, refiner_mlp(blk, h)));
      }
      text = round_if_bf16(ops::rms_norm(text, &refiner_norm_, H, config_.final_norm_eps));
      if (keep) out.activations["token_refiner"] = to_host(text);
      ops::scatter_rows(x, all_rows(src, text.dim(0)) ? text : ops::gather_rows(text, device_index(src)),
                        device_index(dst));
    }
  }
  {
    profile::Region r("embed video, audio, time");
    for (auto [rows, idx, w, b] : {std::tuple{&in.video, &in.video_indices, &proj_in_w, &proj_in_b},
                                   std::tuple{&in.audio, &in.audio_indices, &audio_in_w, &audio_in_b}}) {
      auto [src, dst] = scatter_own(*idx, st.own);
      Tensor mine = upload(all_rows(src, rows->dim(0)) ? *rows : ops::gather_rows(*rows, index_i32(src)));
      ops::scatter_rows(x, round_if_bf16(ops::linear(mine, *w, b)), device_index(dst));
    }
    // Timestep embedding (f32 always), the f32 time MLP, the shared AdaLN input, every block's tables.
    Tensor temb = upload(timestep_embedding(in.timestep, config_.freq_dim));
    temb = ops::linear(ops::silu(ops::linear(temb, t1_w, &t1_b)), t2_w, &t2_b);
    st.ada_in = round_if_bf16(ops::silu(temb));
  }
  {
    profile::Region r("adaln tables");
    st.tables = adaln_tables(st.ada_in);
  }
  {
    profile::Region pr("modulation index");
    std::vector<int32_t> ada_idx;
    const std::vector<int64_t> ts = index_values(in.timestep_indices), tags = index_values(in.token_tags);
    for (int64_t r = st.own.begin; r < st.own.end; ++r) {
      ada_idx.push_back(static_cast<int32_t>(ts[r] * 3 + tags[r]));
    }
    st.ada_idx = device_index(ada_idx);
  }
  return x;
}

// The transformer blocks over the own rows `x`, then the final norm. Returns the normed rows the heads read.
Tensor DitModel::run_blocks(Tensor x, Step& st, const DitCapture& capture, DitOutputs& out) const {
  const bool bf = bf16_steps();
  const int64_t H = config_.hidden_size;
  // FP8 on the GPU: the norms hand their output to the projections already quantized when the projections take
  // this rank's rows as they are (no gather before them) — with one scale bounded from the norm weight and the
  // modulation tables (fast per-tensor GEMMs, no pass over the data), or per row in deterministic mode (cuBLASLt's
  // per-row-scaled GEMMs are slower). Both are independent of how the rows are split over ranks.
  const bool fp8 = precision_ == Precision::fp8 && dev_ != Device::cpu;
  const ops::Fp8Out fp8_norm = numerics_.fp8_row_scales() ? ops::Fp8Out::rows : ops::Fp8Out::bound;
  // Only FP8 projections take quantized input (the layers an FP8 GEMM cannot take stay bf16: fp8_layers_).
  const ops::Fp8Out fp8_attn_in =
      fp8 && fp8_layers_.qkv && plan_.mode != DistMode::ulysses_ag && plan_.K == 1 ? fp8_norm : ops::Fp8Out::none;
  const ops::Fp8Out fp8_mlp_in = fp8 && fp8_layers_.ff_in && plan_.K == 1 ? fp8_norm : ops::Fp8Out::none;
  Tensor pending_gate, pending_y;  // the MLP residual not yet added to x
  const FaultInjection fault = FaultInjection::from_knobs();
  for (size_t n = 0; n < blocks_.size(); ++n) {
    fault.at_block(plan_.rank, static_cast<int>(n));
    // A streamed block's weights come into the ring (the compute queue waits for their copy) and go back when the
    // lease ends, after the block's kernels are queued.
    const BlockLease lease(*this, n);
    const Block& b = lease.block();
    // [M, 18H] viewed as [3M, 6H]: row m*3 + modality, column k*H + c for parameter k of
    // (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp).
    Tensor table = (block_streamed(n) ? block_table(b, st.ada_in) : st.tables[n]).reshape({3 * st.M, 6 * H});
    Tensor p[6];
    for (int k = 0; k < 6; ++k) p[k] = ops::columns(table, k * H, (k + 1) * H);
    // The MLP's gated residual of block n-1 is applied in the same pass as block n's first norm (fused, bitwise
    // the separate ops), unless every block's output is kept.
    ops::ResidualNorm r;
    {
      profile::Region pr("residual+norm+modulate");
      r = ops::residual_norm_modulate(x, pending_gate, st.ada_idx, pending_y, b.norm1, config_.norm_eps, p[0], p[1], bf,
                                      fp8_attn_in);
    }
    Tensor y = attention_block(b, r.h, st);
    {
      profile::Region pr("residual+norm+modulate");
      r = ops::residual_norm_modulate(r.x, p[2], st.ada_idx, y, b.norm2, config_.norm_eps, p[3], p[4], bf, fp8_mlp_in);
    }
    x = r.x;
    pending_y = mlp_block(b, r.h, st);
    pending_gate = p[5];
    if (const std::string name = "block." + std::to_string(n); capture.wants(name)) {
      x = ops::gate_residual(x, pending_gate, st.ada_idx, pending_y, bf);
      pending_gate = pending_y = Tensor();
      out.activations[name] = to_host(gather_rows_from(*plan_.world_comm, *stage_, x, st.rows, "gather activations"));
    }
  }
  // Final norm modulated per timestep only (not per modality): its [M, 2H] table repeated for the three modalities
  // of each timestep, so that the block norms' fused pass (the last MLP residual, the norm, the modulation) indexes
  // it by the same row index. Bitwise the separate ops: gate_residual, rms_norm rounded, modulate by timestep.
  Tensor h;
  {
    profile::Region pr("final norm");
    const Tensor fin = round_if_bf16(ops::linear(st.ada_in, out_ada_w_, &out_ada_b_));
    std::vector<int32_t> by_row(static_cast<size_t>(3 * st.M));
    for (int64_t m = 0; m < 3 * st.M; ++m) by_row[static_cast<size_t>(m)] = static_cast<int32_t>(m / 3);
    const Tensor fin3 = ops::gather_rows(fin, device_index(by_row));
    h = ops::residual_norm_modulate(x, pending_gate, st.ada_idx, pending_y, out_norm_, config_.final_norm_eps,
                                    ops::columns(fin3, 0, H), ops::columns(fin3, H, 2 * H), bf)
            .h;
  }
  if (capture.wants("norm_out"))
    out.activations["norm_out"] =
        to_host(gather_rows_from(*plan_.world_comm, *stage_, h, st.rows, "gather activations"));
  return h;
}

// One output head: its rows in index order; rank j computes those whose packed row it owns.
Tensor DitModel::output_head(const Tensor& h, const Tensor& idx, const Tensor& w, const Tensor& bias,
                             const Step& st) const {
  std::vector<std::vector<int32_t>> per_rank(plan_.world);
  const std::vector<int64_t> rows = index_values(idx);
  for (int64_t i = 0; i < idx.numel(); ++i) {
    const int64_t row = rows[i];
    const int owner = static_cast<int>(
        std::upper_bound(st.rows.begin(), st.rows.end(), row, [](int64_t v, const Range& r) { return v < r.end; }) -
        st.rows.begin());
    per_rank[owner].push_back(static_cast<int32_t>(i));
  }
  std::vector<int32_t> local;
  for (int32_t i : per_rank[plan_.rank]) local.push_back(static_cast<int32_t>(rows[i] - st.own.begin));
  // The packed layout keeps each modality's rows together: then this rank's rows are one run of h, read in place.
  const bool run =
      std::adjacent_find(local.begin(), local.end(), [](int32_t a, int32_t b) { return b != a + 1; }) == local.end();
  const Tensor hin =
      !local.empty() && run ? h.rows(local.front(), local.back() + 1) : ops::gather_rows(h, device_index(local));
  Tensor mine = to_host(ops::linear(hin, w, &bias));
  const int64_t width = w.dim(0);
  std::vector<int64_t> counts;
  for (const auto& pr : per_rank) counts.push_back(static_cast<int64_t>(pr.size()) * width);
  Tensor packed = mine;
  if (plan_.world > 1) {
    packed = Tensor(ct_, {idx.numel(), width});
    plan_.world_comm->allgatherv(mine.raw(), packed.raw(), counts, ct_, "gather output heads");
  }
  std::vector<int32_t> order;
  for (const auto& pr : per_rank) order.insert(order.end(), pr.begin(), pr.end());
  // Every rank's rows already in index order (one rank, or rows split in order): nothing to scatter.
  if (all_rows(order, idx.numel())) return packed;
  Tensor all(ct_, {idx.numel(), width});
  ops::scatter_rows(all, packed, index_i32(order));
  return all;
}

}  // namespace h3

// DitModel's construction (model/dit/dit.h): the checks of the device and precision, this rank's plan (its slices
// of heads, FFN columns and AdaLN rows, which GEMMs run in FP8), then the loads (LoRA agreement, the weights of the
// refiner, the blocks, the heads; streamed blocks parked as they load). DitShard::of is the plan's arithmetic.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>
#include <vector>

#include "core/log.h"
#include "model/dit/dit.h"
#include "model/dit/fp8_layers.h"
#include "model/dit/fp8_qk.h"
#include "model/dit/lora.h"
#include "ops/ops.h"

namespace h3 {

namespace {

// Rows [begin, end) as their own tensor.
// Slices copy; the whole range is the tensor itself (a mapped file stays shared).
Tensor row_slice(const Tensor& t, Range r) {
  return r.size() == t.dim(0) ? t : t.rows(r.begin, r.end).clone();
}
Tensor column_slice(const Tensor& t, Range r) {
  return r.size() == t.dim(1) ? t : ops::columns(t, r.begin, r.end);
}
Tensor concat_rows(const Tensor& a, const Tensor& b) {
  Tensor out = Tensor::empty(a.dtype(), {a.dim(0) + b.dim(0), a.dim(1)}, a.device());
  if (a.on_device()) {
    device_hooks().copy(out.raw(), true, a.raw(), true, a.nbytes());
    device_hooks().copy(static_cast<std::byte*>(out.raw()) + a.nbytes(), true, b.raw(), true, b.nbytes());
    return out;
  }
  std::memcpy(out.raw(), a.raw(), a.nbytes());
  std::memcpy(static_cast<std::byte*>(out.raw()) + a.nbytes(), b.raw(), b.nbytes());
  return out;
}

// What a weight becomes on the GPU: f32 layers stay f32, bf16 layers become bf16, and in fp8 mode the blocks' GEMM
// weights are quantized (per tensor, or per output row in deterministic mode).
enum Kind { f32_layer, bf16_layer, gemm_weight };

// This rank's slices of a transformer block (the plan) and which of its GEMMs run in FP8.
struct BlockSlices {
  Range heads_qkv, heads_out, ffn, ada_rows;
  DitFp8Layers fp8;
};

// One rank's weight reads, counted: each tensor from the checkpoint (or read straight to the device), converted to
// the model's dtypes and devices, its parameters and bytes added to the replicated or sharded account.
class WeightReader {
 public:
  WeightReader(const DitCheckpoint& ck, const DitConfig& config, Precision precision, DType ct, Device dev,
               const Numerics& numerics)
      : loader(dev, "DiT"),
        ck_(ck),
        config_(config),
        precision_(precision),
        ct_(ct),
        dev_(dev),
        numerics_(numerics),
        gpu_(dev != Device::cpu) {}

  // A replicated parameter: read straight to the device when it can be, else through the host.
  Tensor rep(const std::string& key, bool bf16_layer) {
    const Kind kind = bf16_layer ? Kind::bf16_layer : Kind::f32_layer;
    Tensor t = direct(key, {}, {}, kind);
    return keep(t.defined() && t.numel() > 0 ? t : load(key, bf16_layer), false, kind);
  }
  // A replicated linear layer: `<layer>.weight`, then `<layer>.bias`.
  std::pair<Tensor, Tensor> rep_linear(const std::string& layer, bool bf16_layer) {
    Tensor w = rep(layer + ".weight", bf16_layer);
    return {std::move(w), rep(layer + ".bias", bf16_layer)};
  }
  // A refiner block (whole, on every rank) or a transformer block (this rank's slices).
  // norms_only: a streamed block read from the checkpoint at each copy loads its norms (and FP8 attention scales)
  // only (DitModel::park_block_mapped).
  DitModel::Block block(const std::string& p, bool transformer, const BlockSlices& s, bool norms_only = false);

  DeviceLoader loader;
  int64_t rep_params = 0, shard_params = 0;
  size_t rep_bytes = 0, shard_bytes = 0;

 private:
  Tensor finish(Tensor t, bool bf16_layer) const {
    const bool round = bf16_layer && precision_ == Precision::bf16 && !gpu_;
    if (t.dtype() != ct_ || round) t = t.to(ct_);
    if (round) ops::round_bf16_(t);
    return t;
  }
  // GPU, a parameter stored as it is (or per-tensor FP8) in a file: read straight into its final dtype on the device
  // (io/device_loader.h), only this rank's rows / columns; the stored qkv split and fc1 swap are row ranges. An
  // undefined tensor where the value has to be computed on the host first (procedural weights, LoRAs, the other
  // quantized formats: the paths below).
  Tensor direct(const std::string& key, const std::vector<RowRange>& rows, RowRange cols, Kind kind) {
    if (!gpu_) return Tensor();
    const auto sr = ck_.stored_read(key, rows, cols);
    if (!sr) return Tensor();
    const bool fp8 = kind == gemm_weight && precision_ == Precision::fp8;
    const DType want = kind == f32_layer ? DType::f32 : fp8 ? DType::fp8_e4m3 : DType::bf16;
    if (sr->fp8_scale == 0) return loader.load(sr->read, want, numerics_.fp8_row_scales());
    if (want == DType::f32) return Tensor();  // an FP8-stored f32 layer: dequantized on the host
    // The checkpoint's own FP8 values and scale: used as they are by an FP8 model (per-row scales in deterministic
    // mode come from the dequantized values, as for any other weight), dequantized to bf16 otherwise.
    Tensor q = loader.load(sr->read, DType::fp8_e4m3)
                   .with_scale(Tensor::from(std::vector<float>{sr->fp8_scale}, {1}).to_device(dev_));
    if (fp8 && !numerics_.fp8_row_scales()) return q;
    Tensor b = ops::dequantize_fp8(q);
    return fp8 ? ops::quantize_fp8_rows(b) : b;
  }
  // Weights already in the compute dtype are used in place (a memory-mapped file stays shared between ranks).
  Tensor load(const std::string& key, bool bf16_layer) {
    Tensor t = finish(ck_.get(key, dev_), bf16_layer);
    if (gpu_ && ck_.layout() == DitLayout::procedural && ck_.loras().empty()) loader.note_generated(t);
    return t;
  }
  // With LoRAs a rank merges only the rows / columns it keeps (bitwise those of the full merge, model/dit/lora.h).
  Tensor load_rows(const std::string& key, Range r) {
    return ck_.loras().empty() ? row_slice(load(key, true), r) : finish(ck_.get_rows(key, r.begin, r.end), true);
  }
  Tensor load_cols(const std::string& key, Range c) {
    return ck_.loras().empty() ? column_slice(load(key, true), c) : finish(ck_.get_columns(key, c.begin, c.end), true);
  }
  Tensor keep(Tensor t, bool sharded, Kind kind = bf16_layer) {
    (sharded ? shard_params : rep_params) += t.numel();
    if (gpu_) {
      t = t.to_device(dev_);
      // FP8 weight scales per tensor (fast GEMMs), or per output row in deterministic mode: a rank holding a row
      // slice (ulysses-ag, tensor) then gets the same scales, hence the same bits, as the whole weight. A tensor
      // read straight to its final dtype (direct) passes as it is.
      if (kind == gemm_weight && precision_ == Precision::fp8) {
        if (t.dtype() != DType::fp8_e4m3)
          t = numerics_.fp8_row_scales() ? ops::quantize_fp8_rows(t) : ops::quantize_fp8(t);
      } else if (kind != f32_layer && t.dtype() != DType::bf16) {
        t = t.to(DType::bf16);
      }
    }
    (sharded ? shard_bytes : rep_bytes) += t.nbytes();
    return t;
  }

  const DitCheckpoint& ck_;
  const DitConfig& config_;
  Precision precision_;
  DType ct_;
  Device dev_;
  const Numerics& numerics_;
  bool gpu_;
};

DitModel::Block WeightReader::block(const std::string& p, bool transformer, const BlockSlices& s, bool norms_only) {
  const int heads = config_.num_attention_heads;
  const int64_t D = config_.attention_head_dim, H = config_.hidden_size, F = config_.ffn_dim;
  const Range qkv_rows{s.heads_qkv.begin * D, s.heads_qkv.end * D},
      out_cols{s.heads_out.begin * D, s.heads_out.end * D};
  auto whole = [](int64_t n) { return std::vector<RowRange>{{0, n}}; };
  auto rows_of = [](Range r) { return std::vector<RowRange>{{r.begin, r.end}}; };
  DitModel::Block b;
  b.norm1 = rep(p + "norm1.weight", true);
  b.norm2 = rep(p + "norm2.weight", true);
  b.norm_q = rep(p + "attn.norm_q.weight", true);
  b.norm_k = rep(p + "attn.norm_k.weight", true);
  if (gpu_ && precision_ == Precision::fp8 && transformer) {
    const QkFp8Scale q = qk_fp8_scale(b.norm_q, D), k = qk_fp8_scale(b.norm_k, D);
    b.q8_scale = Tensor::from(std::vector<float>{q.scale}, {1}).to_device(dev_);
    b.k8_scale = Tensor::from(std::vector<float>{k.scale}, {1}).to_device(dev_);
    b.q8_norm_bound = q.norm_bound;
    b.k8_norm_bound = k.norm_bound;
  }
  if (norms_only) return b;
  if (!transformer) {  // the refiner runs whole on the ranks that hold text rows
    b.to_q = rep(p + "attn.to_q.weight", true);
    b.to_k = rep(p + "attn.to_k.weight", true);
    b.to_v = rep(p + "attn.to_v.weight", true);
    b.to_out = rep(p + "attn.to_out.0.weight", true);
    b.ff_in = rep(p + "ff.net.0.proj.weight", true);
    b.ff_out = rep(p + "ff.net.2.weight", true);
    return b;
  }
  const bool sliced_qkv = s.heads_qkv.size() != heads, sliced_out = s.heads_out.size() != heads;
  // `direct` first (GPU, file weights), else the host paths.
  auto either = [&](Tensor d, auto host) { return d.defined() && d.numel() > 0 ? d : host(); };
  auto rows_or = [&](const std::string& key, Range r, Kind kind) {
    return either(direct(key, rows_of(r), {}, kind), [&] { return load_rows(key, r); });
  };
  auto cols_or = [&](const std::string& key, int64_t n_rows, Range c, Kind kind) {
    return either(direct(key, whole(n_rows), {c.begin, c.end}, kind), [&] { return load_cols(key, c); });
  };
  // A GEMM whose dimensions an FP8 GEMM cannot take stays bf16 (BlockSlices::fp8).
  auto gemm = [&](bool fp8_ok) { return fp8_ok ? gemm_weight : bf16_layer; };
  const DitFp8Layers& f8 = s.fp8;
  b.to_q = keep(rows_or(p + "attn.to_q.weight", qkv_rows, gemm(f8.qkv)), sliced_qkv, gemm(f8.qkv));
  b.to_k = keep(rows_or(p + "attn.to_k.weight", qkv_rows, gemm(f8.qkv)), sliced_qkv, gemm(f8.qkv));
  b.to_v = keep(rows_or(p + "attn.to_v.weight", qkv_rows, gemm(f8.qkv)), sliced_qkv, gemm(f8.qkv));
  b.to_out = keep(cols_or(p + "attn.to_out.0.weight", H, out_cols, gemm(f8.out)), sliced_out, gemm(f8.out));
  // ff.net.0.proj rows are [value (F); gate (F)]: keep the value and gate rows of this rank's columns.
  const std::string ff_key = p + "ff.net.0.proj.weight";
  const bool sliced_ffn = s.ffn.size() != F;
  const Range gate_rows{F + s.ffn.begin, F + s.ffn.end};
  Tensor ff_in =
      either(direct(ff_key, {{s.ffn.begin, s.ffn.end}, {gate_rows.begin, gate_rows.end}}, {}, gemm(f8.ff_in)), [&] {
        if (!sliced_ffn) return load(ff_key, true);
        if (!ck_.loras().empty()) return concat_rows(load_rows(ff_key, s.ffn), load_rows(ff_key, gate_rows));
        const Tensor all = load(ff_key, true);
        return concat_rows(row_slice(all, s.ffn), row_slice(all, gate_rows));
      });
  b.ff_in = keep(ff_in, sliced_ffn, gemm(f8.ff_in));
  b.ff_out = keep(cols_or(p + "ff.net.2.weight", H, s.ffn, gemm(f8.ff_out)), sliced_ffn, gemm(f8.ff_out));
  const bool sliced_ada = s.ada_rows.size() != 18 * H;
  b.adaln_w = keep(rows_or(p + "adaln_proj.linear.weight", s.ada_rows, bf16_layer), sliced_ada);
  b.adaln_b = keep(either(direct(p + "adaln_proj.linear.bias", rows_of(s.ada_rows), {}, bf16_layer),
                          [&] {
                            return row_slice(load(p + "adaln_proj.linear.bias", true).reshape({18 * H, 1}), s.ada_rows)
                                .reshape({s.ada_rows.size()});
                          }),
                   sliced_ada);
  return b;
}

}  // namespace

// Every rank of a distributed plan must merge the same LoRAs (same tensors, strengths, order): the digests are
// gathered and compared with rank 0's before any weight is used.
void check_lora_agreement(const DitCheckpoint& ck, const DistPlan& plan) {
  if (!plan.world_comm || plan.world_comm->size() == 1) return;
  Comm& comm = *plan.world_comm;
  const uint64_t mine = ck.lora_digest();
  std::vector<uint64_t> all(static_cast<size_t>(comm.size()));
  comm.allgatherv(&mine, all.data(), std::vector<int64_t>(comm.size(), 1), DType::i64, "LoRA digest (agreement)");
  std::string differ;
  for (int r = 1; r < comm.size(); ++r)
    if (all[r] != all[0])
      differ += fmt::format("{}rank {} (digest {:016x})", differ.empty() ? "" : ", ", comm.world_rank(r), all[r]);
  if (!differ.empty()) {
    std::string files;
    for (const auto& l : ck.loras()) files += fmt::format(" {}:{}", l->path, l->strength);
    fail(
        "LoRA: ranks disagree with rank 0 (digest {:016x}): {} -- every rank must load the same --lora files and "
        "strengths in the same order (this is rank {}, LoRAs:{})",
        all[0], differ, comm.rank(), files.empty() ? " none" : files);
  }
}

DitShard DitShard::of(const DitConfig& c, DistMode mode, int K, int U, int t, int u, int world, int64_t S) {
  DitShard s;
  const int heads = c.num_attention_heads;
  const int64_t D = c.attention_head_dim, H = c.hidden_size, F = c.ffn_dim, I = c.inner_dim();
  s.heads_out = K > 1 ? part_of(heads, K, t) : Range{0, heads};
  s.heads_qkv = mode == DistMode::ulysses_ag ? part_of(heads, U, u) : s.heads_out;
  s.ffn = K > 1 ? part_of(F, K, t) : Range{0, F};
  s.ada_rows = K > 1 ? part_of(18 * H, K, t) : Range{0, 18 * H};
  // Per block: the sliced tensors count as sharded when sliced, replicated when whole.
  const int64_t qkv = 3 * s.heads_qkv.size() * D * H, out = H * s.heads_out.size() * D, ffn = 3 * s.ffn.size() * H,
                ada = s.ada_rows.size() * (c.time_embed_dim + 1), norms = 2 * H + 2 * D;
  int64_t rep = norms, shard = 0;
  (s.heads_qkv.size() == heads ? rep : shard) += qkv;
  (s.heads_out.size() == heads ? rep : shard) += out;
  (s.ffn.size() == F ? rep : shard) += ffn;
  (s.ada_rows.size() == 18 * H ? rep : shard) += ada;
  s.replicated_params =
      c.parameter_count() -
      static_cast<int64_t>(c.num_layers) * (3 * I * H + H * I + 3 * F * H + 18 * H * (c.time_embed_dim + 1) + norms) +
      static_cast<int64_t>(c.num_layers) * rep;
  s.sharded_params = static_cast<int64_t>(c.num_layers) * shard;
  // Largest activations of one block: the rows attention projects times the q/k/v width, the MLP intermediate.
  const int64_t own = part_of(S, world, t + u * K).size();
  int64_t group = 0;
  for (int j = 0; j < K; ++j) group += part_of(S, world, u * K + j).size();
  const int64_t proj_rows = mode == DistMode::ulysses_ag ? S : group;
  s.largest_activation_elems =
      std::max({proj_rows * H, proj_rows * s.heads_qkv.size() * D,
                S * (mode == DistMode::ulysses_ag ? s.heads_qkv.size() : part_of(s.heads_out.size(), U, u).size()) * D,
                (K > 1 ? group : own) * 2 * s.ffn.size()});
  return s;
}

DitModel::DitModel(const DitCheckpoint& ck, Precision precision, const DistPlan& plan, Device device,
                   const Numerics& numerics, const DitStreaming& streaming)
    : DitModel(HeadersOnly{}, ck, precision, plan, device, numerics) {
  load_weights(ck, streaming, plan_rank());
}

// The checks and this rank's plan, nothing loaded: the model check_streaming asks, and the start of every other.
DitModel::DitModel(HeadersOnly, const DitCheckpoint& ck, Precision precision, const DistPlan& plan, Device device,
                   const Numerics& numerics)
    : config_(ck.config()),
      precision_(precision),
      ct_(precision == Precision::f64 ? DType::f64 : DType::f32),
      dev_(device),
      numerics_(numerics),
      plan_(plan) {
  check_setup();
}

// The device and precision: bf16 or fp8 on the GPU, f64, f32 or bf16 on the CPU.
void DitModel::check_setup() const {
  const bool gpu = dev_ != Device::cpu;
  if (gpu && precision_ != Precision::bf16 && precision_ != Precision::fp8)
    fail("DiT on the GPU: precision {} is not supported (use bf16 or fp8; f32 and f64 run on the CPU)",
         precision_name(precision_));
  if (!gpu && precision_ == Precision::fp8)
    fail("DiT precision fp8 runs on the GPU only (--device cuda); the CPU runs f64, f32 or bf16");
}

// This rank's slices of the plan (DitShard::of) and, in fp8 on the GPU, the block GEMMs that stay in bf16 because an
// FP8 GEMM cannot take their weights (model/dit/fp8_layers.h), said once per process.
DitShard DitModel::plan_rank() {
  const DitShard shard =
      DitShard::of(config_, plan_.mode, plan_.K, plan_.U, plan_.t, plan_.u, plan_.world, plan_.world);
  heads_out_ = shard.heads_out;
  heads_qkv_ = shard.heads_qkv;
  ffn_ = shard.ffn;
  ada_rows_ = shard.ada_rows;
  if (dev_ != Device::cpu && precision_ == Precision::fp8) {
    fp8_layers_ = dit_fp8_layers(config_, plan_.mode, plan_.K, plan_.U);
    warn_fp8_layers_once(fp8_layers_);
  }
  return shard;
}

// The LoRA agreement, then every weight in the checkpoint's order: the projections and time MLP, the refiner, the
// transformer blocks (a streamed block parked before the next one loads), the final norm and the heads; the held
// parameters checked against the plan's account.
void DitModel::load_weights(const DitCheckpoint& ck, const DitStreaming& streaming, const DitShard& shard) {
  // Parameters that the released checkpoint keeps in f32 stay exact; the rest are rounded to bf16 in bf16 mode.
  check_lora_agreement(ck, plan_);
  start_streaming(streaming, ck);  // before anything loads: a refused mapped source costs no load
  WeightReader r(ck, config_, precision_, ct_, dev_, numerics_);
  std::tie(proj_in_w, proj_in_b) = r.rep_linear("proj_in", false);
  std::tie(audio_in_w, audio_in_b) = r.rep_linear("audio_proj_in", false);
  std::tie(ctx_w, ctx_b) = r.rep_linear("context_embedder", true);
  std::tie(t1_w, t1_b) = r.rep_linear("time_embedder.linear_1", false);
  std::tie(t2_w, t2_b) = r.rep_linear("time_embedder.linear_2", false);
  const BlockSlices slices{heads_qkv_, heads_out_, ffn_, ada_rows_, fp8_layers_};
  for (int i = 0; i < config_.num_refiner_layers; ++i)
    refiner_.push_back(r.block("token_refiner.refiner_blocks." + std::to_string(i) + ".", false, slices));
  for (int n = 0; n < config_.num_layers; ++n) {
    const std::string p = "transformer_blocks." + std::to_string(n) + ".";
    const size_t i = blocks_.size();
    blocks_.push_back(r.block(p, true, slices, block_mapped(i)));
    if (block_mapped(i)) {
      for (const StreamedTensor& t : park_block_mapped(i, ck, p)) {
        (t.sharded ? r.shard_params : r.rep_params) += shape_numel(t.shape);
        (t.sharded ? r.shard_bytes : r.rep_bytes) += static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
      }
    } else if (block_streamed(i)) {
      park_block(i);  // before the next block loads
    }
  }
  refiner_norm_ = r.rep("token_refiner.final_norm.weight", true);
  out_norm_ = r.rep("norm_out.norm.weight", true);
  std::tie(out_ada_w_, out_ada_b_) = r.rep_linear("norm_out.linear", true);
  std::tie(proj_out_w_, proj_out_b_) = r.rep_linear("proj_out", false);
  std::tie(audio_out_w_, audio_out_b_) = r.rep_linear("audio_proj_out", false);
  replicated_bytes_ = r.rep_bytes;
  sharded_bytes_ = r.shard_bytes;
  load_report_ = r.loader.finish();
  finish_streaming();
  H3_ASSERT(r.rep_params == shard.replicated_params && r.shard_params == shard.sharded_params,
            "weights held ({} replicated + {} sharded parameters) differ from the plan's account ({} + {})",
            r.rep_params, r.shard_params, shard.replicated_params, shard.sharded_params);
}

}  // namespace h3

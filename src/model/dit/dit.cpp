#include "model/dit/dit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "core/log.h"
#include "core/ref_math.h"
#include "model/dit/fp8_layers.h"
#include "model/dit/lora.h"
#include "ops/fp8_bound.h"
#include "ops/ops.h"

namespace h3 {

namespace {

Tensor columns(const Tensor& t, int64_t b, int64_t e) {
  return ops::columns(t, b, e);
}

void check_input(const Tensor& t, const char* name, std::initializer_list<DType> dtypes, int ndim) {
  bool ok = false;
  for (DType d : dtypes) ok |= t.dtype() == d;
  if (!t.defined() || !ok || t.ndim() != ndim)
    fail("DiT input '{}': got {}, expected a {}-D tensor of {}", name, t.describe(), ndim, dtype_name(*dtypes.begin()));
}

void check_index(const std::vector<int64_t>& v, const char* name, int64_t limit) {
  for (size_t i = 0; i < v.size(); ++i)
    if (v[i] < 0 || v[i] >= limit) fail("DiT input '{}': entry {} is {}, outside [0, {})", name, i, v[i], limit);
}

}  // namespace

std::vector<int64_t> index_values(const Tensor& t) {
  const Tensor h = t.on_device() ? t.cpu() : t;
  std::vector<int64_t> v(static_cast<size_t>(h.numel()));
  if (h.dtype() == DType::i64) {
    std::memcpy(v.data(), h.raw(), v.size() * sizeof(int64_t));
  } else if (h.dtype() == DType::i32) {
    const int32_t* p = h.data<int32_t>();
    for (size_t i = 0; i < v.size(); ++i) v[i] = p[i];
  } else {
    for (size_t i = 0; i < v.size(); ++i) v[i] = static_cast<int64_t>(h.get(static_cast<int64_t>(i)));
  }
  return v;
}

void DitInputs::validate(const DitConfig& c) const {
  check_input(video, "video (hidden_states)", {DType::f32, DType::f64}, 2);
  check_input(audio, "audio (audio_hidden_states)", {DType::f32, DType::f64}, 2);
  check_input(text, "text (encoder_hidden_states)", {DType::f32, DType::f64}, 2);
  check_input(timestep, "timestep", {DType::f32, DType::f64}, 1);
  check_input(position_ids, "position_ids", {DType::f64, DType::f32}, 2);
  for (auto [t, n] : {std::pair{&timestep_indices, "timestep_indices"},
                      {&token_tags, "token_tags"},
                      {&video_indices, "video_indices"},
                      {&audio_indices, "audio_indices"},
                      {&text_indices, "text_indices"}})
    check_input(*t, n, {DType::i64, DType::i32}, 1);
  const int64_t S = position_ids.dim(0);
  if (position_ids.dim(1) != 3)
    fail("DiT input 'position_ids': shape {} must be [S, 3]", shape_str(position_ids.shape()));
  if (video.dim(1) != c.video_patch_dim())
    fail("DiT input 'video': rows of width {} but the model takes {}", video.dim(1), c.video_patch_dim());
  if (audio.dim(1) != c.audio_in_channels)
    fail("DiT input 'audio': rows of width {} but the model takes {}", audio.dim(1), c.audio_in_channels);
  if (text.dim(1) != c.text_dim)
    fail("DiT input 'text': rows of width {} but the model takes {}", text.dim(1), c.text_dim);
  if (timestep_indices.numel() != S || token_tags.numel() != S)
    fail("DiT inputs: timestep_indices ({}) and token_tags ({}) must have one entry per packed row ({})",
         timestep_indices.numel(), token_tags.numel(), S);
  if (video_indices.numel() != video.dim(0) || audio_indices.numel() != audio.dim(0) ||
      text_indices.numel() != text.dim(0))
    fail("DiT inputs: index counts (video {}, audio {}, text {}) differ from the row counts ({}, {}, {})",
         video_indices.numel(), audio_indices.numel(), text_indices.numel(), video.dim(0), audio.dim(0), text.dim(0));
  if (timestep.numel() == 0) fail("DiT input 'timestep' is empty");
  check_index(index_values(timestep_indices), "timestep_indices", timestep.numel());
  check_index(index_values(token_tags), "token_tags", 3);
  std::vector<uint8_t> used(static_cast<size_t>(S), 0);
  for (auto [t, name] : {std::pair{&video_indices, "video_indices"},
                         {&audio_indices, "audio_indices"},
                         {&text_indices, "text_indices"}}) {
    const std::vector<int64_t> v = index_values(*t);
    check_index(v, name, S);
    for (int64_t r : v)
      if (used[static_cast<size_t>(r)]++) fail("DiT inputs: packed row {} is addressed twice by the index tensors", r);
  }
}

Tensor timestep_embedding(const Tensor& timestep, int freq_dim) {
  const int half = freq_dim / 2;
  const int64_t m = timestep.numel();
  Tensor out(DType::f32, {m, freq_dim});
  float* o = out.data<float>();
  // All f32, as the reference runs it in every precision. Its exp/sin/cos are PyTorch's CPU kernels, i.e. Intel
  // MKL VML (HA): those round a few arguments to the other neighbouring float than the correctly rounded value,
  // and that one ulp alone moves the f64 blocks by ~1e-8 (docs/notes.md). ref_math calls VML when present.
  const float neg_log = static_cast<float>(-std::log(10000.0));
  std::vector<float> exponent(static_cast<size_t>(half)), freq(static_cast<size_t>(half));
  for (int k = 0; k < half; ++k) exponent[k] = (neg_log * static_cast<float>(k)) / static_cast<float>(half);
  ref_math::exp_f32(exponent.data(), freq.data(), half);
  std::vector<float> arg(static_cast<size_t>(m * half)), c(arg.size()), s(arg.size());
  for (int64_t i = 0; i < m; ++i) {
    const float t = static_cast<float>(timestep.get(i));
    for (int k = 0; k < half; ++k) arg[i * half + k] = t * freq[k];
  }
  ref_math::cos_f32(arg.data(), c.data(), static_cast<int64_t>(arg.size()));
  ref_math::sin_f32(arg.data(), s.data(), static_cast<int64_t>(arg.size()));
  for (int64_t i = 0; i < m; ++i)
    for (int k = 0; k < half; ++k) {
      o[i * freq_dim + k] = c[i * half + k];
      o[i * freq_dim + half + k] = s[i * half + k];
    }
  return out;
}

void rope_tables(const Tensor& position_ids, const DitConfig& c, DType dt, Tensor& cos_t, Tensor& sin_t) {
  const int d = c.rope_freq_dim, r = c.rotary_dim();
  const int64_t S = position_ids.dim(0);
  std::vector<float> inv_freq(d);
  const float theta = static_cast<float>(c.rope_theta);
  for (int j = 0; j < d; ++j) {
    const float e = static_cast<float>(2 * j) / static_cast<float>(2 * d);
    inv_freq[j] = 1.0f / static_cast<float>(std::pow(static_cast<double>(theta), static_cast<double>(e)));
  }
  cos_t = Tensor(dt, {S, r});
  sin_t = Tensor(dt, {S, r});
  auto fill = [&]<typename T>(T) {
    T* co = cos_t.data<T>();
    T* so = sin_t.data<T>();
    for (int64_t s = 0; s < S; ++s)
      for (int axis = 0; axis < 3; ++axis) {
        const T pos = static_cast<T>(static_cast<float>(position_ids.get(s * 3 + axis)));
        for (int j = 0; j < d; ++j) {
          const T angle = pos * static_cast<T>(inv_freq[j]);
          const int64_t col = axis * d + j;
          co[s * r + col] = co[s * r + col + 3 * d] = std::cos(angle);
          so[s * r + col] = so[s * r + col + 3 * d] = std::sin(angle);
        }
      }
  };
  if (dt == DType::f64)
    fill(double{});
  else
    fill(float{});
}

namespace {
// Rows [begin, end) as their own tensor.
// Slices copy; the whole range is the tensor itself (a mapped file stays shared).
Tensor row_slice(const Tensor& t, Range r) {
  return r.size() == t.dim(0) ? t : t.rows(r.begin, r.end).clone();
}
Tensor column_slice(const Tensor& t, Range r) {
  return r.size() == t.dim(1) ? t : columns(t, r.begin, r.end);
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
    : config_(ck.config()),
      precision_(precision),
      ct_(precision == Precision::f64 ? DType::f64 : DType::f32),
      dev_(device),
      numerics_(numerics),
      plan_(plan) {
  const bool gpu = dev_ != Device::cpu;
  if (gpu && precision_ != Precision::bf16 && precision_ != Precision::fp8)
    fail("DiT on the GPU: precision {} is not supported (use bf16 or fp8; f32 and f64 run on the CPU)",
         precision_name(precision_));
  if (!gpu && precision_ == Precision::fp8)
    fail("DiT precision fp8 runs on the GPU only (--device cuda); the CPU runs f64, f32 or bf16");
  const int heads = config_.num_attention_heads;
  const int64_t D = config_.attention_head_dim, H = config_.hidden_size, F = config_.ffn_dim;
  const DitShard shard =
      DitShard::of(config_, plan_.mode, plan_.K, plan_.U, plan_.t, plan_.u, plan_.world, plan_.world);
  heads_out_ = shard.heads_out;
  heads_qkv_ = shard.heads_qkv;
  ffn_ = shard.ffn;
  ada_rows_ = shard.ada_rows;
  const Range qkv_rows{heads_qkv_.begin * D, heads_qkv_.end * D}, out_cols{heads_out_.begin * D, heads_out_.end * D};

  // FP8: the block GEMMs whose weights an FP8 GEMM cannot take stay in bf16 (model/dit/fp8_layers.h), said once.
  if (gpu && precision_ == Precision::fp8) {
    fp8_layers_ = dit_fp8_layers(config_, plan_.mode, plan_.K, plan_.U);
    static std::mutex reported_mu;
    static std::set<std::string> reported;
    std::lock_guard lock(reported_mu);
    if (!fp8_layers_.all_fp8() && reported.insert(fp8_layers_.summary()).second)
      spdlog::warn("DiT precision fp8: {}", fp8_layers_.summary());
  }
  // Parameters that the released checkpoint keeps in f32 stay exact; the rest are rounded to bf16 in bf16 mode.
  check_lora_agreement(ck, plan_);
  start_streaming(streaming, ck);  // before anything loads: a refused mapped source costs no load
  auto finish = [&](Tensor t, bool bf16_layer) {
    const bool round = bf16_layer && precision_ == Precision::bf16 && !gpu;
    if (t.dtype() != ct_ || round) t = t.to(ct_);
    if (round) ops::round_bf16_(t);
    return t;
  };
  // On the GPU a weight moves over in its layer's dtype: f32 layers stay f32, bf16 layers become bf16, and in
  // fp8 mode the blocks' GEMM weights are quantized per tensor.
  enum Kind { f32_layer, bf16_layer, gemm_weight };
  // GPU, a parameter stored as it is (or per-tensor FP8) in a file: read straight into its final dtype on the device
  // (io/device_loader.h), only this rank's rows / columns; the stored qkv split and fc1 swap are row ranges. An
  // undefined tensor where the value has to be computed on the host first (procedural weights, LoRAs, the other
  // quantized formats: the paths below).
  DeviceLoader loader(dev_, "DiT");
  auto direct = [&](const std::string& key, const std::vector<RowRange>& rows, RowRange cols, Kind kind) -> Tensor {
    if (!gpu) return Tensor();
    const auto sr = ck.stored_read(key, rows, cols);
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
  };
  auto whole = [](int64_t n) { return std::vector<RowRange>{{0, n}}; };
  auto rows_of = [](Range r) { return std::vector<RowRange>{{r.begin, r.end}}; };
  // Weights already in the compute dtype are used in place (a memory-mapped file stays shared between ranks).
  auto load = [&](const std::string& key, bool bf16_layer) {
    Tensor t = finish(ck.get(key, dev_), bf16_layer);
    if (gpu && ck.layout() == DitLayout::procedural && ck.loras().empty()) loader.note_generated(t);
    return t;
  };
  // With LoRAs a rank merges only the rows / columns it keeps (bitwise those of the full merge, model/dit/lora.h).
  auto load_rows = [&](const std::string& key, Range r) {
    return ck.loras().empty() ? row_slice(load(key, true), r) : finish(ck.get_rows(key, r.begin, r.end), true);
  };
  auto load_cols = [&](const std::string& key, Range c) {
    return ck.loras().empty() ? column_slice(load(key, true), c) : finish(ck.get_columns(key, c.begin, c.end), true);
  };
  int64_t rep_params = 0, shard_params = 0;
  auto keep = [&](Tensor t, bool sharded, Kind kind = bf16_layer) {
    (sharded ? shard_params : rep_params) += t.numel();
    if (gpu) {
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
    (sharded ? sharded_bytes_ : replicated_bytes_) += t.nbytes();
    return t;
  };
  auto rep = [&](const std::string& key, bool bf16_layer) {
    const Kind kind = bf16_layer ? Kind::bf16_layer : Kind::f32_layer;
    Tensor t = direct(key, {}, {}, kind);
    return keep(t.defined() && t.numel() > 0 ? t : load(key, bf16_layer), false, kind);
  };
  proj_in_w = rep("proj_in.weight", false);
  proj_in_b = rep("proj_in.bias", false);
  audio_in_w = rep("audio_proj_in.weight", false);
  audio_in_b = rep("audio_proj_in.bias", false);
  ctx_w = rep("context_embedder.weight", true);
  ctx_b = rep("context_embedder.bias", true);
  t1_w = rep("time_embedder.linear_1.weight", false);
  t1_b = rep("time_embedder.linear_1.bias", false);
  t2_w = rep("time_embedder.linear_2.weight", false);
  t2_b = rep("time_embedder.linear_2.bias", false);
  // mapped: a streamed block read from the checkpoint at each copy loads its norms only (park_block_mapped).
  auto load_block = [&](const std::string& p, bool transformer, bool mapped = false) {
    Block b;
    b.norm1 = rep(p + "norm1.weight", true);
    b.norm2 = rep(p + "norm2.weight", true);
    b.norm_q = rep(p + "attn.norm_q.weight", true);
    b.norm_k = rep(p + "attn.norm_k.weight", true);
    if (gpu && precision_ == Precision::fp8 && transformer) {
      auto bound = [&](const Tensor& w) {
        const Tensor h = w.cpu().to(DType::f32);
        float m = 0;
        for (int64_t i = 0; i < h.numel(); ++i) m = std::max(m, std::fabs(h.data<float>()[i]));
        const float s = std::sqrt(static_cast<float>(config_.attention_head_dim)) * m * 1.02f / 448.0f;
        return Tensor::from(std::vector<float>{ops::round_up_pow2(std::max(s, 1e-12f))}, {1}).to_device(dev_);
      };
      b.q8_scale = bound(b.norm_q);
      b.k8_scale = bound(b.norm_k);
    }
    if (mapped) return b;
    if (!transformer) {  // the refiner runs whole on the ranks that hold text rows
      b.to_q = rep(p + "attn.to_q.weight", true);
      b.to_k = rep(p + "attn.to_k.weight", true);
      b.to_v = rep(p + "attn.to_v.weight", true);
      b.to_out = rep(p + "attn.to_out.0.weight", true);
      b.ff_in = rep(p + "ff.net.0.proj.weight", true);
      b.ff_out = rep(p + "ff.net.2.weight", true);
      return b;
    }
    const bool sliced_qkv = heads_qkv_.size() != heads, sliced_out = heads_out_.size() != heads;
    // `direct` first (GPU, file weights), else the host paths.
    auto either = [&](Tensor d, auto host) { return d.defined() && d.numel() > 0 ? d : host(); };
    auto rows_or = [&](const std::string& key, Range r, Kind kind) {
      return either(direct(key, rows_of(r), {}, kind), [&] { return load_rows(key, r); });
    };
    auto cols_or = [&](const std::string& key, int64_t n_rows, Range c, Kind kind) {
      return either(direct(key, whole(n_rows), {c.begin, c.end}, kind), [&] { return load_cols(key, c); });
    };
    // A GEMM whose dimensions an FP8 GEMM cannot take stays bf16 (fp8_layers_).
    auto gemm = [&](bool fp8_ok) { return fp8_ok ? gemm_weight : bf16_layer; };
    b.to_q = keep(rows_or(p + "attn.to_q.weight", qkv_rows, gemm(fp8_layers_.qkv)), sliced_qkv, gemm(fp8_layers_.qkv));
    b.to_k = keep(rows_or(p + "attn.to_k.weight", qkv_rows, gemm(fp8_layers_.qkv)), sliced_qkv, gemm(fp8_layers_.qkv));
    b.to_v = keep(rows_or(p + "attn.to_v.weight", qkv_rows, gemm(fp8_layers_.qkv)), sliced_qkv, gemm(fp8_layers_.qkv));
    b.to_out = keep(cols_or(p + "attn.to_out.0.weight", H, out_cols, gemm(fp8_layers_.out)), sliced_out,
                    gemm(fp8_layers_.out));
    // ff.net.0.proj rows are [value (F); gate (F)]: keep the value and gate rows of this rank's columns.
    const std::string ff_key = p + "ff.net.0.proj.weight";
    const bool sliced_ffn = ffn_.size() != F;
    const Range gate_rows{F + ffn_.begin, F + ffn_.end};
    Tensor ff_in = either(
        direct(ff_key, {{ffn_.begin, ffn_.end}, {gate_rows.begin, gate_rows.end}}, {}, gemm(fp8_layers_.ff_in)), [&] {
          if (!sliced_ffn) return load(ff_key, true);
          if (!ck.loras().empty()) return concat_rows(load_rows(ff_key, ffn_), load_rows(ff_key, gate_rows));
          const Tensor all = load(ff_key, true);
          return concat_rows(row_slice(all, ffn_), row_slice(all, gate_rows));
        });
    b.ff_in = keep(ff_in, sliced_ffn, gemm(fp8_layers_.ff_in));
    b.ff_out =
        keep(cols_or(p + "ff.net.2.weight", H, ffn_, gemm(fp8_layers_.ff_out)), sliced_ffn, gemm(fp8_layers_.ff_out));
    const bool sliced_ada = ada_rows_.size() != 18 * H;
    b.adaln_w = keep(rows_or(p + "adaln_proj.linear.weight", ada_rows_, bf16_layer), sliced_ada);
    b.adaln_b = keep(either(direct(p + "adaln_proj.linear.bias", rows_of(ada_rows_), {}, bf16_layer),
                            [&] {
                              return row_slice(load(p + "adaln_proj.linear.bias", true).reshape({18 * H, 1}), ada_rows_)
                                  .reshape({ada_rows_.size()});
                            }),
                     sliced_ada);
    return b;
  };
  for (int r = 0; r < config_.num_refiner_layers; ++r)
    refiner_.push_back(load_block("token_refiner.refiner_blocks." + std::to_string(r) + ".", false));
  for (int n = 0; n < config_.num_layers; ++n) {
    const std::string p = "transformer_blocks." + std::to_string(n) + ".";
    const size_t i = blocks_.size();
    blocks_.push_back(load_block(p, true, block_mapped(i)));
    if (block_mapped(i)) {
      for (const StreamedTensor& t : park_block_mapped(i, ck, p)) {
        (t.sharded ? shard_params : rep_params) += shape_numel(t.shape);
        (t.sharded ? sharded_bytes_ : replicated_bytes_) +=
            static_cast<size_t>(shape_numel(t.shape)) * dtype_size(t.dtype);
      }
    } else if (block_streamed(i)) {
      park_block(i);  // before the next block loads
    }
  }
  refiner_norm_ = rep("token_refiner.final_norm.weight", true);
  out_norm_ = rep("norm_out.norm.weight", true);
  out_ada_w_ = rep("norm_out.linear.weight", true);
  out_ada_b_ = rep("norm_out.linear.bias", true);
  proj_out_w_ = rep("proj_out.weight", false);
  proj_out_b_ = rep("proj_out.bias", false);
  audio_out_w_ = rep("audio_proj_out.weight", false);
  audio_out_b_ = rep("audio_proj_out.bias", false);
  load_report_ = loader.finish();
  finish_streaming();
  H3_ASSERT(rep_params == shard.replicated_params && shard_params == shard.sharded_params,
            "weights held ({} replicated + {} sharded parameters) differ from the plan's account ({} + {})", rep_params,
            shard_params, shard.replicated_params, shard.sharded_params);
}

// CPU: rounds the values through bf16 (the emulated recipe). GPU: bf16 layers hold bf16 tensors, so this converts
// an f32 result (an f32 layer's output entering a bf16 layer) to bf16.
Tensor DitModel::round_if_bf16(Tensor t) const {
  if (t.on_device())  // fp8 tensors carry their scale and stay as they are
    return t.dtype() == DType::bf16 || t.dtype() == DType::fp8_e4m3 || precision_ == Precision::f32 ? t
                                                                                                    : t.to(DType::bf16);
  if (precision_ == Precision::bf16) ops::round_bf16_(t);
  return t;
}

// Always a copy: callers round the result in place, and inputs may be read-only mapped files.
Tensor DitModel::upload(const Tensor& t) const {
  if (dev_ == Device::cpu) return t.to(ct_);
  return (t.dtype() == ct_ ? t : t.to(ct_)).to_device(dev_);
}

Tensor DitModel::to_host(const Tensor& t) const {
  if (!t.on_device()) return t;
  Tensor h = t.cpu();
  return h.dtype() == ct_ ? h : h.to(ct_);  // no second host copy when the dtype already matches
}

}  // namespace h3

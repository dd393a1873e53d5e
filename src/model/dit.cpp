#include "model/dit.h"

#include <cmath>

#include "core/log.h"
#include "ops/ops.h"

namespace h3 {

std::string_view precision_name(Precision p) {
  switch (p) {
    case Precision::f64: return "f64";
    case Precision::f32: return "f32";
    case Precision::bf16: return "bf16";
  }
  return "?";
}

Precision precision_from_name(const std::string& s) {
  if (s == "f64") return Precision::f64;
  if (s == "f32") return Precision::f32;
  if (s == "bf16") return Precision::bf16;
  fail("unknown precision '{}' (allowed: f64, f32, bf16)", s);
}

namespace {

Tensor to_i32(const Tensor& t) { return t.to(DType::i32); }

// Columns [begin, end) of a 2-D tensor as a new contiguous tensor.
Tensor columns(const Tensor& t, int64_t begin, int64_t end) {
  const int64_t n = t.dim(0), c = t.dim(1), w = end - begin;
  Tensor out(t.dtype(), {n, w});
  const size_t es = dtype_size(t.dtype());
  const auto* in = static_cast<const std::byte*>(t.raw());
  auto* o = static_cast<std::byte*>(out.raw());
  for (int64_t r = 0; r < n; ++r) std::copy_n(in + (r * c + begin) * es, w * es, o + r * w * es);
  return out;
}

void check_input(const Tensor& t, const char* name, std::initializer_list<DType> dtypes, int ndim) {
  bool ok = false;
  for (DType d : dtypes) ok |= t.dtype() == d;
  if (!t.defined() || !ok || t.ndim() != ndim)
    fail("DiT input '{}': got {}, expected a {}-D tensor of {}", name, t.describe(), ndim,
         dtype_name(*dtypes.begin()));
}

void check_index(const Tensor& t, const char* name, int64_t limit) {
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = t.get(i);
    if (v < 0 || v >= static_cast<double>(limit))
      fail("DiT input '{}': entry {} is {}, outside [0, {})", name, i, v, limit);
  }
}

}  // namespace

void DitInputs::validate(const DitConfig& c) const {
  check_input(video, "video (hidden_states)", {DType::f32, DType::f64}, 2);
  check_input(audio, "audio (audio_hidden_states)", {DType::f32, DType::f64}, 2);
  check_input(text, "text (encoder_hidden_states)", {DType::f32, DType::f64}, 2);
  check_input(timestep, "timestep", {DType::f32, DType::f64}, 1);
  check_input(position_ids, "position_ids", {DType::f64, DType::f32}, 2);
  for (auto [t, n] : {std::pair{&timestep_indices, "timestep_indices"}, {&token_tags, "token_tags"},
                      {&video_indices, "video_indices"}, {&audio_indices, "audio_indices"},
                      {&text_indices, "text_indices"}})
    check_input(*t, n, {DType::i64, DType::i32}, 1);
  const int64_t S = position_ids.dim(0);
  if (position_ids.dim(1) != 3) fail("DiT input 'position_ids': shape {} must be [S, 3]", shape_str(position_ids.shape()));
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
  check_index(timestep_indices, "timestep_indices", timestep.numel());
  check_index(token_tags, "token_tags", 3);
  check_index(video_indices, "video_indices", S);
  check_index(audio_indices, "audio_indices", S);
  check_index(text_indices, "text_indices", S);
  std::vector<uint8_t> used(static_cast<size_t>(S), 0);
  for (const Tensor* t : {&video_indices, &audio_indices, &text_indices})
    for (int64_t i = 0; i < t->numel(); ++i) {
      auto r = static_cast<size_t>(t->get(i));
      if (used[r]++) fail("DiT inputs: packed row {} is addressed twice by the index tensors", r);
    }
}

Tensor timestep_embedding(const Tensor& timestep, int freq_dim) {
  const int half = freq_dim / 2;
  const int64_t m = timestep.numel();
  Tensor out(DType::f32, {m, freq_dim});
  float* o = out.data<float>();
  const float neg_log = static_cast<float>(-std::log(10000.0));
  for (int64_t i = 0; i < m; ++i) {
    const float t = static_cast<float>(timestep.get(i));
    for (int k = 0; k < half; ++k) {
      const float exponent = (neg_log * static_cast<float>(k)) / static_cast<float>(half);
      // Correctly rounded f32 values. The reference's PyTorch CPU kernels use a vectorised libm whose cos/sin are
      // within 1 ulp but not always correctly rounded; that single-ulp difference is the whole f64 gap
      // (docs/notes.md, "timestep embedding").
      const float arg = t * std::exp(exponent);
      o[i * freq_dim + k] = std::cos(arg);
      o[i * freq_dim + half + k] = std::sin(arg);
    }
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
  if (dt == DType::f64) fill(double{}); else fill(float{});
}

DitModel::DitModel(const DitCheckpoint& ck, Precision precision)
    : config_(ck.config()), precision_(precision), ct_(precision == Precision::f64 ? DType::f64 : DType::f32) {
  // Parameters that the released checkpoint keeps in f32 stay exact; the rest are rounded to bf16 in bf16 mode.
  auto load = [&](const std::string& key, bool bf16_layer) {
    Tensor t = ck.get(key).to(ct_);
    if (bf16_layer && precision_ == Precision::bf16) ops::round_bf16_(t);
    return t;
  };
  proj_in_w = load("proj_in.weight", false);
  proj_in_b = load("proj_in.bias", false);
  audio_in_w = load("audio_proj_in.weight", false);
  audio_in_b = load("audio_proj_in.bias", false);
  ctx_w = load("context_embedder.weight", true);
  ctx_b = load("context_embedder.bias", true);
  t1_w = load("time_embedder.linear_1.weight", false);
  t1_b = load("time_embedder.linear_1.bias", false);
  t2_w = load("time_embedder.linear_2.weight", false);
  t2_b = load("time_embedder.linear_2.bias", false);
  auto load_block = [&](const std::string& p, bool adaln) {
    Block b;
    b.norm1 = load(p + "norm1.weight", true);
    b.to_q = load(p + "attn.to_q.weight", true);
    b.to_k = load(p + "attn.to_k.weight", true);
    b.to_v = load(p + "attn.to_v.weight", true);
    b.norm_q = load(p + "attn.norm_q.weight", true);
    b.norm_k = load(p + "attn.norm_k.weight", true);
    b.to_out = load(p + "attn.to_out.0.weight", true);
    b.norm2 = load(p + "norm2.weight", true);
    b.ff_in = load(p + "ff.net.0.proj.weight", true);
    b.ff_out = load(p + "ff.net.2.weight", true);
    if (adaln) {
      b.adaln_w = load(p + "adaln_proj.linear.weight", true);
      b.adaln_b = load(p + "adaln_proj.linear.bias", true);
    }
    return b;
  };
  for (int r = 0; r < config_.num_refiner_layers; ++r)
    refiner_.push_back(load_block("token_refiner.refiner_blocks." + std::to_string(r) + ".", false));
  for (int n = 0; n < config_.num_layers; ++n)
    blocks_.push_back(load_block("transformer_blocks." + std::to_string(n) + ".", true));
  refiner_norm_ = load("token_refiner.final_norm.weight", true);
  out_norm_ = load("norm_out.norm.weight", true);
  out_ada_w_ = load("norm_out.linear.weight", true);
  out_ada_b_ = load("norm_out.linear.bias", true);
  proj_out_w_ = load("proj_out.weight", false);
  proj_out_b_ = load("proj_out.bias", false);
  audio_out_w_ = load("audio_proj_out.weight", false);
  audio_out_b_ = load("audio_proj_out.bias", false);
}

Tensor DitModel::round_if_bf16(Tensor t) const {
  if (precision_ == Precision::bf16) ops::round_bf16_(t);
  return t;
}

Tensor DitModel::attn(const Block& b, const Tensor& h, const Tensor* cos, const Tensor* sin) const {
  const int64_t D = config_.attention_head_dim;
  const bool bf = precision_ == Precision::bf16;
  Tensor q = round_if_bf16(ops::linear(h, b.to_q));
  Tensor k = round_if_bf16(ops::linear(h, b.to_k));
  Tensor v = round_if_bf16(ops::linear(h, b.to_v));
  q = round_if_bf16(ops::rms_norm(q, &b.norm_q, D, config_.qk_norm_eps));
  k = round_if_bf16(ops::rms_norm(k, &b.norm_k, D, config_.qk_norm_eps));
  if (cos) {
    q = ops::rope(q, *cos, *sin, D, bf);
    k = ops::rope(k, *cos, *sin, D, bf);
  }
  Tensor o = round_if_bf16(ops::attention(q, k, v, D));
  return round_if_bf16(ops::linear(o, b.to_out));
}

Tensor DitModel::mlp(const Block& b, const Tensor& h) const {
  Tensor u = round_if_bf16(ops::linear(h, b.ff_in));
  Tensor g = ops::swiglu(u, precision_ == Precision::bf16);
  return round_if_bf16(ops::linear(g, b.ff_out));
}

DitOutputs DitModel::forward(const DitInputs& in, bool keep) const {
  in.validate(config_);
  const bool bf = precision_ == Precision::bf16;
  const int64_t S = in.seq_len(), H = config_.hidden_size, M = in.timestep.numel();
  DitOutputs out;

  Tensor cos, sin;
  rope_tables(in.position_ids, config_, ct_, cos, sin);
  if (bf) {
    ops::round_bf16_(cos);
    ops::round_bf16_(sin);
  }

  // Input projections: the patch projections in f32 (then cast to the block dtype), the text one in block dtype.
  Tensor video = round_if_bf16(ops::linear(in.video.to(ct_), proj_in_w, &proj_in_b));
  Tensor audio = round_if_bf16(ops::linear(in.audio.to(ct_), audio_in_w, &audio_in_b));
  Tensor text = round_if_bf16(ops::linear(round_if_bf16(in.text.to(ct_)), ctx_w, &ctx_b));
  for (const auto& blk : refiner_) {
    Tensor h = round_if_bf16(ops::rms_norm(text, &blk.norm1, H, config_.norm_eps));
    text = round_if_bf16(ops::add(text, attn(blk, h, nullptr, nullptr)));
    h = round_if_bf16(ops::rms_norm(text, &blk.norm2, H, config_.norm_eps));
    text = round_if_bf16(ops::add(text, mlp(blk, h)));
  }
  text = round_if_bf16(ops::rms_norm(text, &refiner_norm_, H, config_.final_norm_eps));
  if (keep) out.activations["token_refiner"] = text;

  Tensor x(ct_, {S, H});
  ops::scatter_rows(x, text, to_i32(in.text_indices));
  ops::scatter_rows(x, video, to_i32(in.video_indices));
  ops::scatter_rows(x, audio, to_i32(in.audio_indices));

  // Timestep embedding (f32 always), the time MLP (f32 layers) and the shared AdaLN input silu(temb).
  Tensor temb = timestep_embedding(in.timestep, config_.freq_dim).to(ct_);
  temb = ops::linear(ops::silu(ops::linear(temb, t1_w, &t1_b)), t2_w, &t2_b);
  Tensor ada_in = round_if_bf16(ops::silu(temb));

  // Row r of the packed sequence reads AdaLN table row timestep_indices[r] * 3 + token_tags[r].
  Tensor ti = to_i32(in.timestep_indices);
  Tensor ada_idx(DType::i32, {S});
  for (int64_t r = 0; r < S; ++r)
    ada_idx.data<int32_t>()[r] = static_cast<int32_t>(in.timestep_indices.get(r) * 3 + in.token_tags.get(r));

  for (size_t n = 0; n < blocks_.size(); ++n) {
    const Block& b = blocks_[n];
    // [M, 18H] viewed as [3M, 6H]: row m*3 + modality, column k*H + c for parameter k of
    // (shift_msa, scale_msa, gate_msa, shift_mlp, scale_mlp, gate_mlp).
    Tensor table = round_if_bf16(ops::linear(ada_in, b.adaln_w, &b.adaln_b)).reshape({3 * M, 6 * H});
    Tensor p[6];
    for (int k = 0; k < 6; ++k) p[k] = columns(table, k * H, (k + 1) * H);
    Tensor h = round_if_bf16(ops::rms_norm(x, &b.norm1, H, config_.norm_eps));
    h = ops::modulate(h, p[0], p[1], ada_idx, bf);
    x = ops::gate_residual(x, p[2], ada_idx, attn(b, h, &cos, &sin), bf);
    h = round_if_bf16(ops::rms_norm(x, &b.norm2, H, config_.norm_eps));
    h = ops::modulate(h, p[3], p[4], ada_idx, bf);
    x = ops::gate_residual(x, p[5], ada_idx, mlp(b, h), bf);
    if (keep) out.activations["block." + std::to_string(n)] = x;
  }

  // Final norm modulated per timestep only (not per modality), then both f32 heads over every row.
  Tensor fin = round_if_bf16(ops::linear(ada_in, out_ada_w_, &out_ada_b_));
  Tensor shift = columns(fin, 0, H), scale = columns(fin, H, 2 * H);
  Tensor h = round_if_bf16(ops::rms_norm(x, &out_norm_, H, config_.final_norm_eps));
  h = ops::modulate(h, shift, scale, ti, bf);
  if (keep) out.activations["norm_out"] = h;
  Tensor hv = ops::gather_rows(h, to_i32(in.video_indices));
  Tensor ha = ops::gather_rows(h, to_i32(in.audio_indices));
  out.video = ops::linear(hv, proj_out_w_, &proj_out_b_);
  out.audio = ops::linear(ha, audio_out_w_, &audio_out_b_);
  (void)M;
  return out;
}

}  // namespace h3

// DitModel's inputs and tables (model/dit/dit.h): the checks of a forward's inputs, the timestep embedding, the RoPE
// tables, and the conversions between the host and the model's device and dtype. Construction is in load.cpp, the
// forward in forward.cpp, weight streaming in streaming.cpp.
#include "model/dit/dit.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/log.h"
#include "core/ref_math.h"
#include "ops/ops.h"

namespace h3 {

namespace {

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

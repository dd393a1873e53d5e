// DitCheckpoint's reads (model/dit/checkpoint.h): one parameter by its diffusers key, from its file (dequantized and
// converted as its quantization says) or made procedurally; the bytes a parameter is stored in, and the counts of
// stored dtypes and quantized formats. Opening, layout detection and the key mapping are in checkpoint.cpp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

#include "core/finite.h"
#include "io/procedural.h"
#include "model/dit/checkpoint.h"

namespace h3 {

DType DitCheckpoint::stored_dtype(const std::string& key) const {
  auto it = sources_.find(key);
  if (it == sources_.end()) fail("{}: no parameter '{}'", path_, key);
  if (it->second.file < 0) return DType::f32;
  return files_[it->second.file]->info(it->second.key).dtype;
}

Tensor DitCheckpoint::get(const std::string& key, Device device) const {
  if (device == Device::cpu) return get(key);
  auto it = sources_.find(key);
  if (it != sources_.end() && it->second.file < 0 && loras_.empty())
    for (const auto& [k, s] : config_.parameters())
      if (k == key) return procedural_tensor(k, s, seed_, device);
  return get(key).to_device(device);
}

Tensor DitCheckpoint::get_base(const std::string& key) const {
  auto it = sources_.find(key);
  if (it == sources_.end()) fail("{}: no parameter '{}'", path_, key);
  const Source& src = it->second;
  if (src.file < 0) {
    for (const auto& [k, s] : config_.parameters())
      if (k == key) return procedural_tensor(k, s, seed_);
  }
  Tensor t = files_[src.file]->get(src.key);
  if (src.quant.kind == QuantSpec::nvfp4) {
    const Tensor s2 = files_[src.file]->get(src.quant.scale2_key);
    if (s2.numel() != 1)
      fail("{}: '{}' is {}, expected one f32 value", files_[src.file]->path(), src.quant.scale2_key, s2.describe());
    t = dequantize_nvfp4(t, files_[src.file]->get(src.quant.scale_key), static_cast<float>(s2.get(0)),
                         files_[src.file]->path() + ": '" + src.key + "'");
  } else if (src.quant.kind != QuantSpec::none)
    t = dequantize_weight(t, files_[src.file]->get(src.quant.scale_key), src.quant,
                          files_[src.file]->path() + ": '" + src.key + "'");
  // An integer tensor where a float weight belongs would be read as numbers it never meant.
  H3_CHECK(dtype_is_float(t.dtype()),
           "{}: weight '{}' is stored as {}; DiT weights must be float (F32, F16, BF16, F64) or a quantized format "
           "with its scales: is this the right file?",
           files_[src.file]->path(), src.key, dtype_safetensors_name(t.dtype()));
  // NaN / Inf are refused where they enter: in a run they turn every output into NaN, found only at its end.
  if (const NonFinite bad = find_non_finite(t); bad.count > 0)
    fail(
        "{}: weight '{}' holds {} non-finite values (NaN or Inf), the first at element {}; the checkpoint is "
        "damaged (download or convert it again)",
        files_[src.file]->path(), src.key, bad.count, bad.first);
  if (src.kind == Source::plain) return t;
  const int64_t rows = t.dim(0), cols = t.dim(1);
  const size_t row_bytes = static_cast<size_t>(cols) * dtype_size(t.dtype());
  const auto* in = static_cast<const std::byte*>(t.raw());
  if (src.kind == Source::swap_halves) {  // [gate; value] -> [value; gate]
    Tensor out(t.dtype(), t.shape());
    auto* o = static_cast<std::byte*>(out.raw());
    const int64_t half = rows / 2;
    std::memcpy(o, in + half * row_bytes, half * row_bytes);
    std::memcpy(o + half * row_bytes, in, half * row_bytes);
    return out;
  }
  // qkv part: blocked rows [part*inner, (part+1)*inner); interleaved row of head h, channel d of part p is
  // h*3*D + p*D + d.
  const int64_t inner = rows / 3, D = config_.attention_head_dim, heads = inner / D;
  Tensor out(t.dtype(), {inner, cols});
  auto* o = static_cast<std::byte*>(out.raw());
  if (qkv_order_ == QkvOrder::blocked) {
    std::memcpy(o, in + src.part * inner * row_bytes, inner * row_bytes);
  } else {
    for (int64_t h = 0; h < heads; ++h)
      std::memcpy(o + h * D * row_bytes, in + (h * 3 * D + src.part * D) * row_bytes, D * row_bytes);
  }
  return out;
}

std::optional<DitCheckpoint::StoredRead> DitCheckpoint::stored_read(const std::string& key,
                                                                    const std::vector<RowRange>& rows,
                                                                    RowRange cols) const {
  auto it = sources_.find(key);
  if (it == sources_.end()) fail("{}: no parameter '{}'", path_, key);
  const Source& src = it->second;
  if (src.file < 0 || !loras_.empty()) return std::nullopt;
  const SafeTensors& f = *files_[src.file];
  const TensorInfo& ti = f.info(src.key);
  StoredRead out;
  if (src.quant.kind == QuantSpec::fp8) {
    const Tensor s = f.get(src.quant.scale_key);
    if (ti.dtype != DType::fp8_e4m3 || s.numel() != 1 || !dtype_is_float(s.dtype()))
      return std::nullopt;  // the host path reports what is wrong
    out.fp8_scale = static_cast<float>(s.get(0));
    if (!(out.fp8_scale > 0) || !std::isfinite(out.fp8_scale)) return std::nullopt;
  } else if (src.quant.kind != QuantSpec::none || !dtype_is_float(ti.dtype)) {
    return std::nullopt;  // the host path dequantizes, or refuses an integer tensor where a float weight belongs
  }
  if (ti.shape.empty()) return std::nullopt;
  // The parameter's row i is stored row row_of(i) of the file's tensor (index equations at get_base).
  const int64_t stored_rows = ti.shape[0];
  int64_t n = stored_rows, half = stored_rows / 2, inner = stored_rows / 3;
  const int64_t D = config_.attention_head_dim;
  if (src.kind == Source::qkv_part) n = inner;
  auto row_of = [&](int64_t i) -> int64_t {
    switch (src.kind) {
      case Source::plain:
        return i;
      case Source::swap_halves:  // [gate; value] stored, [value; gate] wanted
        return i < half ? half + i : i - half;
      case Source::qkv_part:
        return qkv_order_ == QkvOrder::blocked ? src.part * inner + i : (i / D) * 3 * D + src.part * D + i % D;
    }
    return i;
  };
  std::vector<RowRange> want = rows.empty() ? std::vector<RowRange>{{0, n}} : rows;
  std::vector<RowRange> stored;
  for (const RowRange& r : want) {
    if (r.begin < 0 || r.end > n || r.begin > r.end)
      fail("{}: rows [{}, {}) of '{}' lie outside its {} rows", path_, r.begin, r.end, key, n);
    for (int64_t i = r.begin; i < r.end; ++i) {
      const int64_t s = row_of(i);
      if (!stored.empty() && stored.back().end == s)
        ++stored.back().end;
      else
        stored.push_back({s, s + 1});
    }
  }
  out.read = read_rows(f, src.key, stored, cols);
  return out;
}

std::shared_ptr<const void> DitCheckpoint::keep_files() const {
  return std::make_shared<const std::vector<std::shared_ptr<SafeTensors>>>(files_);
}

size_t DitCheckpoint::stored_bytes() const {
  size_t total = 0;
  std::set<std::pair<int, std::string>> seen;
  for (const auto& [k, src] : sources_) {
    if (src.file < 0) {
      for (const auto& [pk, s] : config_.parameters())
        if (pk == k) total += shape_numel(s) * 4;
      continue;
    }
    if (!seen.insert({src.file, src.key}).second) continue;
    const auto& ti = files_[src.file]->info(src.key);
    total += ti.end - ti.begin;
  }
  return total;
}

std::map<std::string, int64_t> DitCheckpoint::quant_counts() const {
  std::map<std::string, int64_t> counts;
  for (const auto& [k, src] : sources_) {
    switch (src.quant.kind) {
      case QuantSpec::none:
        break;
      case QuantSpec::fp8:
        counts["fp8"] += 1;
        break;
      case QuantSpec::int8:
        counts[src.quant.convrot_group > 0 ? "int8-convrot" : "int8"] += 1;
        break;
      case QuantSpec::nvfp4:
        counts["nvfp4"] += 1;
        break;
      case QuantSpec::mxfp8:
        counts["mxfp8"] += 1;
        break;
    }
  }
  return counts;
}

std::map<DType, int64_t> DitCheckpoint::dtype_counts() const {
  std::map<DType, int64_t> counts;
  for (const auto& [k, src] : sources_) counts[stored_dtype(k)] += 1;
  return counts;
}

}  // namespace h3

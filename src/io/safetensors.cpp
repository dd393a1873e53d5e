#include "io/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/files.h"
#include "core/json_limits.h"

namespace h3 {

namespace {
constexpr size_t kMaxHeader = 100u << 20;  // 100 MiB: far above any real header

size_t checked_mul(size_t a, size_t b, const std::string& path, const std::string& key) {
  if (a != 0 && b > std::numeric_limits<size_t>::max() / a)
    fail("{}: tensor '{}': shape too large (byte size overflows)", path, key);
  return a * b;
}
}  // namespace

void safetensors_parse(const std::string& path, const std::byte* bytes, size_t size,
                       std::map<std::string, TensorInfo>& infos, std::vector<std::string>& keys,
                       std::map<std::string, std::string>& metadata, size_t& data_offset) {
  if (size < 8) fail("{}: not a safetensors file: {} bytes, shorter than the 8-byte header length", path, size);
  uint64_t n = 0;
  std::memcpy(&n, bytes, 8);  // little-endian hosts only (x86-64, aarch64)
  if (n > kMaxHeader || n > size - 8)
    fail("{}: header length {} exceeds the file ({} bytes) -- truncated or not a safetensors file", path, n, size);
  // Bounded: a header nested deeper than a real one (3 levels) or naming a tensor twice is refused.
  const nlohmann::json header = parse_json_bounded(
      std::string_view(reinterpret_cast<const char*>(bytes) + 8, static_cast<size_t>(n)), path + ": header", 16);
  if (!header.is_object()) fail("{}: header must be a JSON object", path);
  data_offset = 8 + static_cast<size_t>(n);
  size_t data_size = size - data_offset;
  std::vector<std::pair<size_t, std::string>> order;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    if (key == "__metadata__") {
      if (!v.is_object()) fail("{}: __metadata__ must be an object of strings", path);
      for (auto m = v.begin(); m != v.end(); ++m) {
        if (!m.value().is_string()) fail("{}: __metadata__ entry '{}' is not a string", path, m.key());
        metadata[m.key()] = m.value().get<std::string>();
      }
      continue;
    }
    if (!v.is_object()) fail("{}: tensor '{}': entry must be an object", path, key);
    for (auto f = v.begin(); f != v.end(); ++f)
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets")
        fail("{}: tensor '{}': unexpected field '{}'", path, key, f.key());
    if (!v.contains("dtype") || !v["dtype"].is_string())
      fail("{}: tensor '{}': missing or non-string 'dtype'", path, key);
    // F8_E8M0 (MXFP8 block scales: one biased power-of-two exponent per byte) has no arithmetic of its own here:
    // it is read as its raw bytes (U8) and interpreted by io/quant.h.
    const std::string dt_name = v["dtype"].get<std::string>();
    auto dt = dt_name == "F8_E8M0" ? std::optional<DType>(DType::u8) : dtype_from_safetensors(dt_name);
    if (!dt)
      fail(
          "{}: tensor '{}': unsupported dtype '{}' (supported: F64 F32 BF16 F16 F8_E4M3 I64 I32 I8 U8, F8_E8M0 as "
          "bytes)",
          path, key, dt_name);
    if (!v.contains("shape") || !v["shape"].is_array())
      fail("{}: tensor '{}': missing or non-array 'shape'", path, key);
    TensorInfo ti;
    ti.dtype = *dt;
    size_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_unsigned()) fail("{}: tensor '{}': shape entries must be non-negative integers", path, key);
      uint64_t dim = d.get<uint64_t>();
      if (dim > (uint64_t{1} << 48)) fail("{}: tensor '{}': dimension {} is out of range", path, key, dim);
      ti.shape.push_back(static_cast<int64_t>(dim));
      numel = checked_mul(numel, static_cast<size_t>(dim), path, key);
    }
    const auto& off = v.contains("data_offsets") ? v["data_offsets"] : nlohmann::json();
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
      fail("{}: tensor '{}': 'data_offsets' must be two non-negative integers", path, key);
    ti.begin = off[0].get<uint64_t>();
    ti.end = off[1].get<uint64_t>();
    if (ti.begin > ti.end) fail("{}: tensor '{}': data_offsets [{}, {}] are reversed", path, key, ti.begin, ti.end);
    if (ti.end > data_size)
      fail("{}: tensor '{}': data [{}, {}) lies outside the data region of {} bytes -- the file is truncated", path,
           key, ti.begin, ti.end, data_size);
    size_t expect = checked_mul(numel, dtype_size(ti.dtype), path, key);
    if (ti.end - ti.begin != expect)
      fail("{}: tensor '{}': {} {} needs {} bytes but data_offsets span {}", path, key,
           dtype_safetensors_name(ti.dtype), shape_str(ti.shape), expect, ti.end - ti.begin);
    order.emplace_back(ti.begin, key);
    infos.emplace(key, std::move(ti));
  }
  std::sort(order.begin(), order.end(), [&](const auto& a, const auto& b) {
    if (a.first != b.first) return a.first < b.first;
    return infos.at(a.second).end < infos.at(b.second).end;
  });
  size_t prev_end = 0;
  std::string prev_key;
  for (const auto& [begin, key] : order) {
    const auto& ti = infos.at(key);
    if (ti.begin < prev_end && ti.end > ti.begin)
      fail("{}: tensors '{}' and '{}' overlap in the data region", path, prev_key, key);
    if (ti.end > ti.begin) {
      prev_end = ti.end;
      prev_key = key;
    }
    keys.push_back(key);
  }
}

SafeTensors SafeTensors::open(const std::string& path) {
  SafeTensors st;
  st.path_ = path;
  st.file_ = MappedFile::open(path);
  size_t offset = 0;
  safetensors_parse(path, st.file_->data(), st.file_->size(), st.infos_, st.keys_, st.metadata_, offset);
  st.data_ = st.file_->data() + offset;
  st.data_size_ = st.file_->size() - offset;
  return st;
}

const TensorInfo& SafeTensors::info(const std::string& key) const {
  auto it = infos_.find(key);
  if (it == infos_.end()) fail("{}: no tensor named '{}'", path_, key);
  return it->second;
}

std::string SafeTensors::meta(const std::string& key) const {
  auto it = metadata_.find(key);
  return it == metadata_.end() ? std::string() : it->second;
}

Tensor SafeTensors::get(const std::string& key) const {
  const auto& ti = info(key);
  const std::byte* p = data_ + ti.begin;
  if (reinterpret_cast<uintptr_t>(p) % dtype_size(ti.dtype) != 0) {
    Tensor t(ti.dtype, ti.shape);
    std::memcpy(t.raw(), p, ti.end - ti.begin);
    return t;
  }
  return Tensor(ti.dtype, ti.shape, file_, const_cast<std::byte*>(p));
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name == "__metadata__") fail("{}: '__metadata__' is not a valid tensor name", path);
    if (header.contains(name)) fail("{}: tensor '{}' given twice", path, name);
    H3_ASSERT(t.device() == Device::cpu, "write_safetensors needs host tensors ({})", name);
    header[name] = {{"dtype", dtype_safetensors_name(t.dtype())},
                    {"shape", t.shape()},
                    {"data_offsets", {offset, offset + t.nbytes()}}};
    offset += t.nbytes();
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  check_output_file(path, "safetensors output");
  std::string tmp = path + ".partial";
  std::FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) fail("{}: cannot create: {}", tmp, std::strerror(errno));
  uint64_t n = text.size();
  bool ok = std::fwrite(&n, 8, 1, f) == 1 && std::fwrite(text.data(), 1, text.size(), f) == text.size();
  for (const auto& [name, t] : tensors)
    if (ok && t.nbytes()) ok = std::fwrite(t.raw(), 1, t.nbytes(), f) == t.nbytes();
  ok = (std::fclose(f) == 0) && ok;
  if (!ok) {
    std::remove(tmp.c_str());
    fail("{}: write failed (disk full?)", path);
  }
  std::error_code ec;
  try {
    check_output_file(path, "safetensors output");  // again: the path may have changed while writing
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    fail("{}: cannot rename from {}: {}", path, tmp, ec.message());
  }
}

}  // namespace h3

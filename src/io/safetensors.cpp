#include "io/safetensors.h"

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

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

void SafeTensors::read(const std::string& key, size_t offset, void* dst, size_t bytes) const {
  const auto& ti = info(key);
  if (offset > ti.end - ti.begin || bytes > ti.end - ti.begin - offset)
    fail("{}: tensor '{}': read of {} bytes at {} runs past its {} bytes", path_, key, bytes, offset,
         ti.end - ti.begin);
  const size_t at = static_cast<size_t>(data_ - file_->data()) + ti.begin + offset;
  try {
    file_->read_at(at, dst, bytes);
  } catch (const Error& e) {
    fail("tensor '{}': {}", key, e.what());
  }
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

struct SafeTensorsWriter::State {
  std::FILE* f = nullptr;
  std::string tmp;
  std::thread thread;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Tensor> queue;
  size_t queued = 0, max_queued = 0;
  bool closing = false;
  std::string error;  // the first failure, reported by the next write() or finish()
};

SafeTensorsWriter::SafeTensorsWriter(const std::string& path, const std::vector<SafeTensorsEntry>& entries,
                                     const std::map<std::string, std::string>& metadata, size_t max_queued_bytes)
    : st_(std::make_unique<State>()), path_(path), entries_(entries) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  size_t offset = 0;
  for (const auto& e : entries_) {
    if (e.name == "__metadata__") fail("{}: '__metadata__' is not a valid tensor name", path);
    if (header.contains(e.name)) fail("{}: tensor '{}' given twice", path, e.name);
    const size_t bytes = static_cast<size_t>(shape_numel(e.shape)) * dtype_size(e.dtype);
    header[e.name] = {
        {"dtype", dtype_safetensors_name(e.dtype)}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  while ((text.size() + 8) % 8 != 0) text.push_back(' ');
  check_output_file(path, "safetensors output");
  st_->tmp = path + ".partial";
  st_->max_queued = max_queued_bytes;
  st_->f = std::fopen(st_->tmp.c_str(), "wb");
  if (!st_->f) fail("{}: cannot create: {}", st_->tmp, std::strerror(errno));
  const uint64_t n = text.size();
  if (std::fwrite(&n, 8, 1, st_->f) != 1 || std::fwrite(text.data(), 1, text.size(), st_->f) != text.size()) {
    std::fclose(st_->f);
    std::remove(st_->tmp.c_str());
    fail("{}: write failed (disk full?)", path);
  }
  file_bytes_ = 8 + text.size() + offset;
  State* st = st_.get();
  st->thread = std::thread([st] {
    for (;;) {
      Tensor t;
      {
        std::unique_lock lock(st->mu);
        st->cv.wait(lock, [&] { return !st->queue.empty() || st->closing; });
        if (st->queue.empty()) return;
        // Taken off the queue now, not after the write: an abandoning destructor clears the queue meanwhile, and a
        // pop from the cleared queue corrupted it (std::bad_alloc, 1 in ~900 runs of the layout test).
        t = std::move(st->queue.front());
        st->queue.pop_front();
      }
      const bool ok = t.nbytes() == 0 || std::fwrite(t.raw(), 1, t.nbytes(), st->f) == t.nbytes();
      std::lock_guard lock(st->mu);
      st->queued -= t.nbytes();  // counted until written: write()'s back-pressure includes the one in flight
      if (!ok && st->error.empty()) st->error = std::strerror(errno);
      st->cv.notify_all();
    }
  });
}

SafeTensorsWriter::~SafeTensorsWriter() {
  if (finished_) return;
  {
    std::lock_guard lock(st_->mu);
    st_->closing = true;
    st_->queue.clear();  // drop what is left: the file is abandoned (the one being written finishes)
  }
  st_->cv.notify_all();
  if (st_->thread.joinable()) st_->thread.join();
  if (st_->f) std::fclose(st_->f);
  std::remove(st_->tmp.c_str());
}

void SafeTensorsWriter::write(const std::string& name, Tensor t) {
  H3_ASSERT(!finished_, "{}: write('{}') after finish()", path_, name);
  if (next_ >= entries_.size()) fail("{}: tensor '{}' written past the {} announced", path_, name, entries_.size());
  const SafeTensorsEntry& e = entries_[next_];
  if (e.name != name || e.dtype != t.dtype() || e.shape != t.shape())
    fail("{}: tensor {} of the file is '{}' {} {}, but '{}' {} was written", path_, next_, e.name, dtype_name(e.dtype),
         shape_str(e.shape), name, t.describe());
  H3_ASSERT(t.device() == Device::cpu, "SafeTensorsWriter needs host tensors ({})", name);
  ++next_;
  std::unique_lock lock(st_->mu);
  st_->cv.wait(lock, [&] { return st_->queued == 0 || st_->queued + t.nbytes() <= st_->max_queued; });
  if (!st_->error.empty()) fail("{}: write failed (disk full?): {}", path_, st_->error);
  st_->queued += t.nbytes();
  st_->queue.push_back(std::move(t));
  st_->cv.notify_all();
}

void SafeTensorsWriter::finish() {
  H3_ASSERT(!finished_, "{}: finish() twice", path_);
  if (next_ != entries_.size()) fail("{}: {} of the {} announced tensors were written", path_, next_, entries_.size());
  {
    std::lock_guard lock(st_->mu);
    st_->closing = true;
  }
  st_->cv.notify_all();
  st_->thread.join();
  const bool closed = std::fclose(st_->f) == 0;
  st_->f = nullptr;
  if (!st_->error.empty() || !closed) {
    std::remove(st_->tmp.c_str());
    finished_ = true;
    fail("{}: write failed (disk full?){}", path_, st_->error.empty() ? "" : ": " + st_->error);
  }
  std::error_code ec;
  finished_ = true;
  try {
    check_output_file(path_, "safetensors output");  // again: the path may have changed while writing
  } catch (...) {
    std::remove(st_->tmp.c_str());
    throw;
  }
  std::filesystem::rename(st_->tmp, path_, ec);
  if (ec) {
    std::remove(st_->tmp.c_str());
    fail("{}: cannot rename from {}: {}", path_, st_->tmp, ec.message());
  }
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafeTensorsEntry> entries;
  entries.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    H3_ASSERT(t.device() == Device::cpu, "write_safetensors needs host tensors ({})", name);
    entries.push_back({name, t.dtype(), t.shape()});
  }
  SafeTensorsWriter w(path, entries, metadata);
  for (const auto& [name, t] : tensors) w.write(name, t);
  w.finish();
}

}  // namespace h3

#include "io/device_loader.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <mutex>

#include "core/device.h"
#include "core/error.h"
#include "core/finite.h"
#include "core/log.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace h3 {

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Dtypes the device converts itself (core/device.h: DeviceHooks::convert); others are converted on the host first.
bool device_convertible(DType t) {
  return t == DType::f64 || t == DType::f32 || t == DType::bf16 || t == DType::fp8_e4m3 || t == DType::i32 ||
         t == DType::i64;
}

}  // namespace

size_t TensorRead::bytes() const {
  size_t n = 0;
  for (const Span& s : spans) n += s.bytes;
  return n;
}

std::vector<ReadPiece> read_pieces(const TensorRead& r, size_t from, size_t bytes, size_t piece_bytes) {
  H3_ASSERT(piece_bytes > 0, "read_pieces: piece_bytes 0");
  std::vector<ReadPiece> pieces;
  size_t pos = 0, done = 0;
  for (const TensorRead::Span& s : r.spans) {
    if (done == bytes) break;
    const size_t end = pos + s.bytes;
    if (end > from + done) {
      size_t off = from + done - pos;  // into this span
      while (off < s.bytes && done < bytes) {
        const size_t n = std::min({s.bytes - off, bytes - done, piece_bytes});
        pieces.push_back({s.offset + off, n, done});
        off += n;
        done += n;
      }
    }
    pos = end;
  }
  H3_ASSERT(done == bytes, "read_pieces: {} of {} bytes of '{}' found in its spans", done, bytes, r.key);
  return pieces;
}

TensorRead read_tensor(const SafeTensors& f, const std::string& key) {
  const TensorInfo& ti = f.info(key);
  TensorRead r;
  r.file = &f;
  r.key = key;
  r.dtype = ti.dtype;
  r.shape = ti.shape;
  if (ti.end > ti.begin) r.spans.push_back({0, ti.end - ti.begin});
  return r;
}

TensorRead read_rows(const SafeTensors& f, const std::string& key, const std::vector<RowRange>& rows, RowRange cols) {
  const TensorInfo& ti = f.info(key);
  if (ti.shape.empty()) fail("{}: tensor '{}' is a scalar; it has no rows to read", f.path(), key);
  const int64_t R = ti.shape[0];
  const bool slice_cols = cols.size() != 0 || cols.begin != 0;
  if (slice_cols && (ti.shape.size() != 2 || cols.begin < 0 || cols.end > ti.shape[1] || cols.begin >= cols.end))
    fail("{}: tensor '{}' {}: columns [{}, {}) are not a column range of a 2-D tensor", f.path(), key,
         shape_str(ti.shape), cols.begin, cols.end);
  const int64_t C = R > 0 ? shape_numel(ti.shape) / std::max<int64_t>(R, 1) : 0;  // elements per stored row
  const size_t es = dtype_size(ti.dtype);
  TensorRead r;
  r.file = &f;
  r.key = key;
  r.dtype = ti.dtype;
  int64_t total = 0;
  auto add = [&](size_t offset, size_t bytes) {
    if (bytes == 0) return;
    if (!r.spans.empty() && r.spans.back().offset + r.spans.back().bytes == offset)
      r.spans.back().bytes += bytes;
    else
      r.spans.push_back({offset, bytes});
  };
  for (const RowRange& rr : rows) {
    if (rr.begin < 0 || rr.end > R || rr.begin > rr.end)
      fail("{}: tensor '{}' {}: rows [{}, {}) lie outside its {} rows", f.path(), key, shape_str(ti.shape), rr.begin,
           rr.end, R);
    total += rr.size();
    if (!slice_cols) {
      add(static_cast<size_t>(rr.begin * C) * es, static_cast<size_t>(rr.size() * C) * es);
      continue;
    }
    for (int64_t i = rr.begin; i < rr.end; ++i)
      add(static_cast<size_t>(i * C + cols.begin) * es, static_cast<size_t>(cols.size()) * es);
  }
  r.shape = ti.shape;
  r.shape[0] = total;
  if (slice_cols) r.shape[1] = cols.size();
  return r;
}

std::string LoadReport::summary() const {
  std::string s = fmt::format("{}: {} tensors, {:.2f} GB read in {:.2f} s = {:.2f} GB/s (reading {:.2f} s", label,
                              tensors, static_cast<double>(file_bytes) / 1e9, seconds, gb_per_s(), read_seconds);
  if (device != Device::cpu) s += fmt::format(", waiting for copies {:.2f} s", wait_seconds);
  s += ")";
  if (generated > 0) s += fmt::format("; {} tensors generated in place", generated);
  s += fmt::format("; {:.2f} GB {}", static_cast<double>(result_bytes) / 1e9,
                   device == Device::cpu ? "in host memory" : "on the GPU");
  return s;
}

DeviceLoader::DeviceLoader(Device device, std::string label) : DeviceLoader(device, std::move(label), Options{}) {}

DeviceLoader::DeviceLoader(Device device, std::string label, const Options& options) : device_(device), opt_(options) {
  H3_ASSERT(opt_.buffers >= 2 && opt_.chunk_bytes >= 4096 && opt_.chunk_bytes % 8 == 0 && opt_.piece_bytes > 0 &&
                opt_.piece_bytes % 8 == 0,
            "DeviceLoader: options (chunk_bytes {}, piece_bytes {}: multiples of 8)", opt_.chunk_bytes,
            opt_.piece_bytes);
  report_.label = std::move(label);
  report_.device = device;
  start_ns_ = now_ns();
}

DeviceLoader::~DeviceLoader() {
  wait_all();
  if (!bufs_.empty()) {
    const DeviceHooks& h = device_hooks();
    for (Staging& b : bufs_) h.pinned_release(b.data);
  }
}

void DeviceLoader::wait_all() noexcept {
  if (bufs_.empty()) return;
  try {
    const DeviceHooks& h = device_hooks();
    // Every copy was queued on the one compute stream: an event after the last covers them all.
    void* e = h.event_record();
    h.event_wait(e);
    h.event_release(e);
    for (Staging& b : bufs_) {
      if (b.event) h.event_release(b.event);
      b.event = nullptr;
      b.fill = 0;
    }
    cur_ = 0;
  } catch (const std::exception& ex) {
    spdlog::error("{}: waiting for the staged copies failed: {}", report_.label, ex.what());
  }
}

// Reads bytes [from, from + bytes) of the gathered tensor into dst: the spans' parts cut into pieces of at most
// piece_bytes, read by the worker threads in parallel.
void DeviceLoader::read_into(const TensorRead& r, size_t from, size_t bytes, std::byte* dst) {
  const std::vector<ReadPiece> pieces = read_pieces(r, from, bytes, opt_.piece_bytes);
  // Every piece holds whole elements: `from` and `bytes` are element multiples (stage() keeps them so) and the
  // spans and piece_bytes are too, so each piece is scanned on its own.
  const size_t es = dtype_size(r.dtype);
  const bool scan = opt_.refuse_non_finite && dtype_is_float(r.dtype);
  H3_ASSERT(!scan || (from % es == 0 && bytes % es == 0 && opt_.piece_bytes % es == 0),
            "DeviceLoader: bytes [{}, +{}) of '{}' cut its {}-byte elements", from, bytes, r.key, es);
  std::mutex mu;
  const int64_t t0 = now_ns();
  parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const ReadPiece& p = pieces[i];
      r.file->read(r.key, p.src, dst + p.dst, p.bytes);
      if (!scan) continue;
      const NonFinite bad = find_non_finite(r.dtype, dst + p.dst, static_cast<int64_t>(p.bytes / es));
      if (bad.count == 0) continue;
      const int64_t first = static_cast<int64_t>(p.src / es) + bad.first;
      std::lock_guard lock(mu);
      bad_count_ += bad.count;
      if (bad_first_ < 0 || first < bad_first_) bad_first_ = first;
    }
  });
  report_.read_seconds += static_cast<double>(now_ns() - t0) * 1e-9;
}

void DeviceLoader::refuse_if_non_finite(const TensorRead& r) {
  if (bad_count_ == 0) return;
  const int64_t count = bad_count_, first = bad_first_;
  bad_count_ = 0;
  bad_first_ = -1;
  wait_all();  // no copy may still write into the tensor that is about to be dropped
  fail(
      "{}: {} weight '{}' holds {} non-finite value{} (NaN or Inf), the first at element {}; the file is damaged "
      "(download or convert it again)",
      r.file->path(), report_.label, r.key, count, count == 1 ? "" : "s", first);
}

void DeviceLoader::rotate() {
  const DeviceHooks& h = device_hooks();
  Staging& done = bufs_[cur_];
  if (done.event) h.event_release(done.event);
  done.event = h.event_record();
  cur_ = (cur_ + 1) % bufs_.size();
  Staging& next = bufs_[cur_];
  if (next.event) {
    const int64_t t0 = now_ns();
    h.event_wait(next.event);
    report_.wait_seconds += static_cast<double>(now_ns() - t0) * 1e-9;
    h.event_release(next.event);
    next.event = nullptr;
  }
  next.fill = 0;
}

// Fills staging buffers with consecutive parts of the gathered bytes and queues each part's copy to
// device_dst + its offset as soon as it is read; a full buffer hands over to the next one.
void DeviceLoader::stage(const TensorRead& r, void* device_dst) {
  const DeviceHooks& h = device_hooks();
  if (bufs_.empty()) {
    bufs_.resize(static_cast<size_t>(opt_.buffers));
    for (Staging& b : bufs_) b.data = static_cast<std::byte*>(h.pinned_alloc(opt_.chunk_bytes));
  }
  const size_t total = r.bytes();
  // A tensor starts on an 8-byte boundary of a buffer, so every part staged holds whole elements (chunk_bytes is a
  // multiple of 8): each part is scanned on its own (read_into) and the copies stay aligned.
  if (Staging& b = bufs_[cur_]; b.fill % 8 != 0) {
    b.fill += 8 - b.fill % 8;
    if (b.fill >= opt_.chunk_bytes) rotate();
  }
  size_t done = 0;
  while (done < total) {
    Staging& b = bufs_[cur_];
    const size_t n = std::min(opt_.chunk_bytes - b.fill, total - done);
    read_into(r, done, n, b.data + b.fill);
    h.copy_async(static_cast<std::byte*>(device_dst) + done, true, b.data + b.fill, false, n);
    b.fill += n;
    done += n;
    if (b.fill == opt_.chunk_bytes) rotate();
  }
}

Tensor DeviceLoader::load(const TensorRead& r, DType dtype, bool fp8_rows) {
  H3_ASSERT(r.file != nullptr, "DeviceLoader::load: no file for '{}'", r.key);
  H3_ASSERT(r.bytes() == static_cast<size_t>(shape_numel(r.shape)) * dtype_size(r.dtype),
            "DeviceLoader::load: '{}' gathers {} bytes for {} {}", r.key, r.bytes(), dtype_name(r.dtype),
            shape_str(r.shape));
  if (dtype == DType::fp8_e4m3 && r.dtype != DType::fp8_e4m3 && device_ == Device::cpu)
    fail("{}: '{}' asked for in FP8 on the CPU; FP8 weights are quantized on the GPU", r.file->path(), r.key);
  open_ = true;
  Tensor raw;
  if (device_ == Device::cpu || !device_convertible(r.dtype)) {
    // Straight into a host tensor; a dtype the device cannot convert (f16, ...) becomes f32 here before it moves.
    raw = Tensor(r.dtype, r.shape);
    read_into(r, 0, r.bytes(), static_cast<std::byte*>(raw.raw()));
    if (device_ != Device::cpu) raw = raw.to(DType::f32).to_device(device_);
  } else {
    raw = Tensor::empty(r.dtype, r.shape, device_);
    stage(r, raw.raw());
  }
  refuse_if_non_finite(r);
  report_.tensors += 1;
  report_.file_bytes += r.bytes();
  Tensor out;
  if (raw.dtype() == dtype)
    out = raw;
  else if (dtype == DType::fp8_e4m3)
    out = fp8_rows ? ops::quantize_fp8_rows(raw) : ops::quantize_fp8(raw);
  else
    out = raw.to(dtype);
  report_.result_bytes += out.nbytes();
  return out;
}

void DeviceLoader::note_generated(const Tensor& t) {
  open_ = true;
  report_.generated += 1;
  report_.result_bytes += t.nbytes();
}

const LoadReport& DeviceLoader::finish() {
  if (!open_) return report_;
  if (device_ != Device::cpu && have_device_backend()) {
    const DeviceHooks& h = device_hooks();
    void* e = h.event_record();  // everything queued so far, conversions and generated tensors included
    const int64_t t0 = now_ns();
    h.event_wait(e);
    report_.wait_seconds += static_cast<double>(now_ns() - t0) * 1e-9;
    h.event_release(e);
  }
  report_.seconds = static_cast<double>(now_ns() - start_ns_) * 1e-9;
  open_ = false;
  if (report_.tensors + report_.generated > 0) spdlog::info("load {}", report_.summary());
  return report_;
}

}  // namespace h3

#include "io/layer_stream.h"

#include <algorithm>
#include <cstring>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"

namespace h3 {

namespace {

constexpr size_t kAlign = 256;

size_t align_up(size_t n) {
  return (n + kAlign - 1) / kAlign * kAlign;
}

std::string size_of(int64_t bytes) {
  return format_byte_size(bytes);
}

}  // namespace

std::vector<bool> spread_resident(int n, int r) {
  n = std::max(n, 0);
  r = std::clamp(r, 0, n);
  std::vector<bool> resident(static_cast<size_t>(n), false);
  for (int64_t j = 0; j < r; ++j) resident[static_cast<size_t>((2 * j + 1) * n / (2 * int64_t{r}))] = true;
  return resident;
}

std::string_view park_source_name(ParkSource s) {
  return s == ParkSource::mapped ? "mapped" : "pinned";
}

bool pinned_copies_fit(int64_t park_bytes, int64_t available) {
  return park_bytes + kParkHostMarginBytes <= available;
}

void fail_unmappable(const std::string& label, int64_t park_bytes, const HostMemory& host, const std::string& why) {
  fail(
      "{}: streaming its layers needs {} of page-locked host memory (and {} left free beside it), but only {} of "
      "this host's {} are available, and its checkpoint cannot be read as the device holds it{} (an FP8 run needs "
      "an FP8 checkpoint: h3 convert --quant fp8; bf16 weights need a bf16 file); free host memory, use such a "
      "checkpoint, or keep more layers on the GPU",
      label, size_of(park_bytes), size_of(kParkHostMarginBytes), size_of(host.available), size_of(host.total),
      why.empty() ? "" : ": " + why);
}

ParkSource choose_park_source(const std::string& label, int64_t park_bytes, int64_t staging_bytes, bool mappable,
                              const HostMemory& host) {
  if (pinned_copies_fit(park_bytes, host.available)) return ParkSource::pinned;
  if (mappable && staging_bytes + kParkHostMarginBytes <= host.available) return ParkSource::mapped;
  if (!mappable) fail_unmappable(label, park_bytes, host, "");
  fail(
      "{}: streaming its layers from the checkpoint needs {} of page-locked staging buffers (and {} left free beside "
      "them), but only {} of this host's {} are available; free host memory or keep more layers on the GPU",
      label, size_of(staging_bytes), size_of(kParkHostMarginBytes), size_of(host.available), size_of(host.total));
}

std::string LayerStreamStats::summary() const {
  return fmt::format(
      "{} of {} layers streamed through {} slots ({} on the device); parked {} page-locked, {} read from files "
      "({} staging); {} copies, {} copied, {} out of order",
      streamed, layers, slots, size_of(slot_bytes), size_of(parked_bytes), size_of(mapped_bytes),
      size_of(staging_bytes), copies, size_of(copied_bytes), misses);
}

size_t LayerStreamer::record_bytes(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes) {
  H3_ASSERT(shapes.size() == dtypes.size(), "record_bytes: {} shapes, {} dtypes", shapes.size(), dtypes.size());
  size_t off = 0;
  for (size_t i = 0; i < shapes.size(); ++i)
    off = align_up(off + static_cast<size_t>(shape_numel(shapes[i])) * dtype_size(dtypes[i]));
  return off;
}

LayerStreamer::LayerStreamer(Device device, std::string label, int layers)
    : LayerStreamer(device, std::move(label), layers, Options{}) {}

LayerStreamer::LayerStreamer(Device device, std::string label, int layers, const Options& options)
    : q_device_(device), label_(std::move(label)), opt_(options) {
  H3_CHECK(layers >= 0, "{}: a layer streamer over {} layers", label_, layers);
  H3_CHECK(opt_.slots >= 1,
           "{}: a layer streamer needs at least 1 slot (2 or more overlap copies with compute), got {}", label_,
           opt_.slots);
  H3_CHECK(opt_.chunk_bytes >= kAlign, "{}: layer streamer chunk of {} bytes", label_, opt_.chunk_bytes);
  layers_.resize(static_cast<size_t>(layers));
  stats_.layers = layers;
}

LayerStreamer::~LayerStreamer() {
  drop_ring();
  const StreamQueues q{q_device_};
  for (Layer& l : layers_) q.host_free(l.host);
}

void LayerStreamer::drop_ring() {
  const StreamQueues q{q_device_};
  for (Slot& s : slots_) {
    try {
      wait_queued(s);
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", label_, e.what());
    }
  }
  reader_.reset();
  for (Slot& s : slots_) {
    try {
      q.host_wait(s.copied);
    } catch (const std::exception& e) {
      spdlog::error("{}: waiting for the layer copies failed: {}", label_, e.what());
    }
    q.release(s.copied);
    q.release(s.freed);
    q.host_free(s.staging);
  }
  slots_.clear();
}

void LayerStreamer::stop() {
  for (const Slot& s : slots_)
    H3_CHECK(!s.in_use, "{}: its ring given back while {} is acquired", label_, what(s.layer));
  wait_copies();  // a failed copy is reported here, not only logged
  drop_ring();
  started_ = false;
  next_ = 0;
}

std::string LayerStreamer::what(int layer) const {
  return fmt::format("{} layer {}", label_, layer);
}

LayerStreamer::Layer& LayerStreamer::check_layer(int layer, const char* verb) {
  H3_CHECK(layer >= 0 && layer < static_cast<int>(layers_.size()), "{}: {} layer {}: it has layers 0..{}", label_, verb,
           layer, static_cast<int>(layers_.size()) - 1);
  return layers_[static_cast<size_t>(layer)];
}

LayerStreamer::Layer& LayerStreamer::begin_park(int layer) {
  Layer& l = check_layer(layer, "park");
  H3_CHECK(!started_, "{}: parked after streaming started; park every layer before the first acquire", what(layer));
  H3_CHECK(!l.parked, "{}: parked twice", what(layer));
  return l;
}

void LayerStreamer::end_park(int layer) {
  Layer& l = layers_[static_cast<size_t>(layer)];
  l.parked = true;
  order_.insert(std::upper_bound(order_.begin(), order_.end(), layer), layer);
  largest_ = std::max(largest_, l.bytes);
  stats_.streamed = static_cast<int>(order_.size());
}

void LayerStreamer::park(int layer, std::vector<Tensor> tensors) {
  Layer& l = begin_park(layer);
  size_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    H3_CHECK(t.device() == q_device_, "{}: tensor {} ({}) lives on the {}, the streamer on the {}", what(layer), i,
             t.describe(), t.on_device() ? "GPU" : "host", q_device_ == Device::cpu ? "host" : "GPU");
    l.entries.push_back({t.dtype(), t.shape(), off, t.scale() ? *t.scale() : Tensor()});
    off = align_up(off + t.nbytes());
  }
  l.bytes = off;
  l.source = ParkSource::pinned;
  l.host = StreamQueues{q_device_}.host_alloc(l.bytes);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    if (t.nbytes() == 0) continue;
    if (q_device_ == Device::cpu)
      std::memcpy(l.host + l.entries[i].offset, t.raw(), t.nbytes());
    else
      device_hooks().copy(l.host + l.entries[i].offset, false, t.raw(), true, t.nbytes());  // waits for it
  }
  stats_.parked_bytes += l.bytes;
  end_park(layer);
}

void LayerStreamer::park_mapped(int layer, std::vector<MappedTensor> tensors) {
  Layer& l = begin_park(layer);
  size_t off = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const MappedTensor& m = tensors[i];
    Shape shape = m.read.shape;
    size_t at = off;
    for (size_t k = 0; k <= m.stacked.size(); ++k) {
      const TensorRead& r = k == 0 ? m.read : m.stacked[k - 1];
      const size_t bytes = static_cast<size_t>(shape_numel(r.shape)) * dtype_size(r.dtype);
      H3_CHECK(r.file != nullptr && r.bytes() == bytes, "{}: tensor {} ('{}') reads {} bytes for {} {}", what(layer), i,
               r.key, r.bytes(), dtype_name(r.dtype), shape_str(r.shape));
      if (k > 0) {
        H3_CHECK(r.dtype == m.read.dtype && r.shape.size() == shape.size() && !shape.empty() &&
                     std::equal(r.shape.begin() + 1, r.shape.end(), shape.begin() + 1),
                 "{}: tensor {}: '{}' ({} {}) cannot be stacked under '{}' ({} {})", what(layer), i, r.key,
                 dtype_name(r.dtype), shape_str(r.shape), m.read.key, dtype_name(m.read.dtype),
                 shape_str(m.read.shape));
        shape[0] += r.shape[0];
      }
      l.parts.push_back({r, at});
      at += bytes;
    }
    l.entries.push_back({m.read.dtype, shape, off, m.scale});
    if (m.owner && (owners_.empty() || owners_.back() != m.owner)) owners_.push_back(m.owner);
    off = align_up(at);
  }
  l.bytes = off;
  l.source = ParkSource::mapped;
  stats_.mapped_bytes += l.bytes;
  end_park(layer);
}

bool LayerStreamer::streamed(int layer) const {
  return layer >= 0 && layer < static_cast<int>(layers_.size()) && layers_[static_cast<size_t>(layer)].parked;
}

void LayerStreamer::start() {
  if (started_) return;
  started_ = true;
  if (order_.empty()) return;
  const StreamQueues q{q_device_};
  const size_t n = std::min(order_.size(), static_cast<size_t>(opt_.slots));
  const bool mapped = std::any_of(order_.begin(), order_.end(),
                                  [&](int i) { return layers_[static_cast<size_t>(i)].source == ParkSource::mapped; });
  slots_.resize(n);
  for (Slot& s : slots_) {
    s.storage = Tensor::empty(DType::u8, {static_cast<int64_t>(std::max<size_t>(largest_, 1))}, q_device_);
    s.owner = std::make_shared<Tensor>(s.storage);
    s.base = static_cast<std::byte*>(s.storage.raw());
    s.copied = q.event();
    s.freed = q.event();
    // The slot's memory may have held a tensor whose kernels are still queued on the compute queue (the caching
    // allocator's reuse is ordered by that queue alone): the first fill waits for this point of it too.
    q.record(s.freed, Queue::compute);
    if (mapped) s.staging = q.host_alloc(largest_);
  }
  if (mapped) reader_ = std::make_unique<StagedReader>(q, opt_.chunk_bytes);
  stats_.slots = static_cast<int>(n);
  stats_.slot_bytes = n * largest_;
  stats_.staging_bytes = mapped ? n * largest_ : 0;
  for (size_t i = 0; i < n; ++i) fill(slots_[i], order_[i]);
  next_ = n % order_.size();
}

int LayerStreamer::slot_of(int layer) const {
  for (size_t i = 0; i < slots_.size(); ++i)
    if (slots_[i].layer == layer) return static_cast<int>(i);
  return -1;
}

// For a layer no slot holds: a slot not in use, an empty one first, else the one whose layer comes latest in the
// cyclic order after `layer` (needed last).
int LayerStreamer::victim_for(int layer) const {
  const size_t m = order_.size();
  const size_t at = static_cast<size_t>(std::lower_bound(order_.begin(), order_.end(), layer) - order_.begin());
  int best = -1;
  size_t best_distance = 0;
  for (size_t i = 0; i < slots_.size(); ++i) {
    const Slot& s = slots_[i];
    if (s.in_use) continue;
    if (s.layer < 0) return static_cast<int>(i);
    const size_t p = static_cast<size_t>(std::lower_bound(order_.begin(), order_.end(), s.layer) - order_.begin());
    const size_t distance = (p + m - at) % m;
    if (best < 0 || distance > best_distance) best = static_cast<int>(i), best_distance = distance;
  }
  return best;
}

// Step 1 of the protocol (layer_stream.h): inline for a pinned layer, on the reader thread for a mapped one.
void LayerStreamer::fill(Slot& s, int layer) {
  const Layer& l = layers_[static_cast<size_t>(layer)];
  s.layer = layer;
  if (l.source == ParkSource::pinned) {
    const StreamQueues q{q_device_};
    q.wait(Queue::transfer, s.freed);
    q.copy(Queue::transfer, s.base, true, l.host, false, l.bytes);
    q.record(s.copied, Queue::transfer);
  } else {
    s.ticket = reader_->submit({&l.parts, s.staging, s.base, s.freed, s.copied, what(layer)});
  }
  stats_.copies += 1;
  stats_.copied_bytes += l.bytes;
}

void LayerStreamer::wait_queued(Slot& s) {
  if (s.ticket == 0) return;
  const uint64_t ticket = s.ticket;
  s.ticket = 0;
  try {
    stats_.reader_wait_s += reader_->wait(ticket);
  } catch (...) {
    s.layer = -1;  // its bytes are not the layer's
    throw;
  }
}

std::vector<Tensor> LayerStreamer::acquire(int layer) {
  Layer& l = check_layer(layer, "acquire");
  H3_CHECK(l.parked, "{}: acquired but not streamed (resident layers are used as they are)", what(layer));
  start();
  int si = slot_of(layer);
  if (si >= 0 && slots_[static_cast<size_t>(si)].in_use)
    fail("{}: acquired twice without a release in between", what(layer));
  if (si < 0) {
    si = victim_for(layer);
    H3_CHECK(si >= 0,
             "{}: acquired while all {} slots hold acquired layers; release one first or stream with more slots",
             what(layer), slots_.size());
    Slot& v = slots_[static_cast<size_t>(si)];
    wait_queued(v);  // a fill the reader has not queued yet must not land after this one
    stats_.misses += 1;
    fill(v, layer);
    const size_t at = static_cast<size_t>(std::lower_bound(order_.begin(), order_.end(), layer) - order_.begin());
    next_ = (at + 1) % order_.size();
  }
  Slot& s = slots_[static_cast<size_t>(si)];
  wait_queued(s);
  const StreamQueues q{q_device_};
  q.wait(Queue::compute, s.copied);
  s.in_use = true;
  std::vector<Tensor> views;
  views.reserve(l.entries.size());
  for (const Entry& e : l.entries) {
    Tensor v(e.dtype, e.shape, s.owner, s.base + e.offset, q_device_);
    views.push_back(e.scale.defined() ? v.with_scale(e.scale) : v);
  }
  return views;
}

void LayerStreamer::release(int layer) {
  (void)check_layer(layer, "release");
  const int si = slot_of(layer);
  H3_CHECK(si >= 0 && slots_[static_cast<size_t>(si)].in_use, "{}: released but not acquired", what(layer));
  Slot& s = slots_[static_cast<size_t>(si)];
  const StreamQueues q{q_device_};
  q.record(s.freed, Queue::compute);
  s.in_use = false;
  // Prefetch into the freed slot: the next streamed layer in cyclic order that no slot holds.
  const size_t m = order_.size();
  for (size_t k = 0; k < m; ++k) {
    const size_t p = (next_ + k) % m;
    if (slot_of(order_[p]) >= 0) continue;
    fill(s, order_[p]);
    next_ = (p + 1) % m;
    return;
  }
}

void LayerStreamer::wait_copies() {
  const StreamQueues q{q_device_};
  for (Slot& s : slots_) {
    wait_queued(s);
    q.host_wait(s.copied);
  }
}

LayerStreamStats LayerStreamer::stats() const {
  return stats_;
}

}  // namespace h3

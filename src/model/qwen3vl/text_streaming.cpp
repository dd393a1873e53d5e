// The Qwen3-VL text tower's layer streaming (Qwen3VlTextOptions::resident_layers; io/layer_stream.h has the ring
// and its event protocol). A streamed layer is loaded like any other, then its units' tensors are parked in host
// memory, so the device holds the resident layers plus one layer at a time while loading and the ring
// (ring_slots x the largest layer) afterwards. At the released size a layer's units are 0.975 GB in bf16 (q and o
// 8192 x 5120, k and v 1024 x 5120, [up; gate] 51200 x 5120, down 5120 x 25600): 50 resident layers take 48.8 GB,
// a ring of 3 slots 2.9 GB, the embeddings 1.6 GB.
#include "core/log.h"
#include "io/device_loader.h"
#include "model/qwen3vl/text.h"

namespace h3 {

namespace {

constexpr int kUnitTensors = 6;  // q, k, v, o, up_gate, down: park_units' order

}  // namespace

void Qwen3VlTextModel::plan_streaming(int64_t n_layers, const Qwen3VlTextOptions& opt, const Qwen3VlTextWeights& w,
                                      const std::string& prefix) {
  if (opt.resident_layers < -1)
    fail("Qwen3-VL text tower: {} resident layers (use -1 for all, or 0..{} to stream the others)", opt.resident_layers,
         n_layers);
  if (opt.resident_layers < 0 || opt.resident_layers >= n_layers || tp_rank_ < 0) return;
  if (opt.ring_slots < 1)
    fail("Qwen3-VL text tower: a ring of {} slots (streaming needs 1 or more; 2 or more overlap copies with compute)",
         opt.ring_slots);
  LayerStreamer::Options so;
  so.slots = opt.ring_slots;
  streamer_ = std::make_unique<LayerStreamer>(device_, "Qwen3-VL text tower", static_cast<int>(n_layers), so);
  const std::vector<bool> resident = spread_resident(static_cast<int>(n_layers), opt.resident_layers);
  streamed_.assign(resident.size(), false);
  for (size_t i = 0; i < resident.size(); ++i) streamed_[i] = !resident[i];
  park_source_ = opt.park_source;
  if (park_source_ != ParkSource::mapped) return;
  // The mapped source reads the stored bytes as they are: every streamed unit tensor must be stored in the compute
  // dtype. Checked before anything loads (shapes and missing keys are the load's to report).
  int64_t park_bytes = 0;
  std::string problem;
  if (w.procedural()) problem = "procedural weights are generated where they load, not stored";
  for (int64_t i = 0; i < n_layers; ++i) {
    if (!streamed_[static_cast<size_t>(i)]) continue;
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (int64_t g = units_.begin; g < units_.end; ++g) {
      const std::vector<UnitPart> parts = unit_parts(g);
      for (size_t k = 0; k < parts.size(); ++k) {
        const UnitPart& u = parts[k];
        const int64_t rows = u.rows.all() ? u.shape[0] : u.rows.end - u.rows.begin;
        const int64_t cols = u.cols.all() ? u.shape[1] : u.cols.end - u.cols.begin;
        if (k == 5) {  // gate: stacked under up in one tensor
          shapes.back()[0] += rows;
        } else {
          shapes.push_back({rows, cols});
          dtypes.push_back(dtype_);
        }
        const std::string key = prefix + "layers." + std::to_string(i) + "." + u.key;
        if (problem.empty() && w.has(key) && w.info(key).dtype != dtype_)
          problem = fmt::format("'{}' is stored {}, the tower computes in {}", key, dtype_name(w.info(key).dtype),
                                dtype_name(dtype_));
      }
    }
    park_bytes += static_cast<int64_t>(LayerStreamer::record_bytes(shapes, dtypes));
  }
  if (!problem.empty())
    fail_unmappable("Qwen3-VL text tower", park_bytes, opt.host, fmt::format("{} ({})", problem, w.path()));
}

void Qwen3VlTextModel::park_units_mapped(int64_t layer, Layer& L, const Qwen3VlTextWeights& w,
                                         const std::string& layer_prefix) {
  std::shared_ptr<const void> files = w.keep_files();
  std::vector<MappedTensor> tensors;
  auto read = [&](const UnitPart& u) {
    const std::string key = layer_prefix + u.key;
    if (w.info(key).shape != u.shape)
      fail("{}: the Qwen3-VL text decoder does not load: {} is {}, expected {}", w.path(), key,
           shape_str(w.info(key).shape), shape_str(u.shape));
    const TensorRead r =
        read_rows(w.file_of(key), key, {u.rows.all() ? RowRange{0, u.shape[0]} : RowRange{u.rows.begin, u.rows.end}},
                  u.cols.all() ? RowRange{} : RowRange{u.cols.begin, u.cols.end});
    bytes_sharded_ += r.bytes();
    bytes_streamed_ += r.bytes();
    return r;
  };
  for (int64_t g = units_.begin; g < units_.end; ++g) {
    const std::vector<UnitPart> p = unit_parts(g);  // q, k, v, o, up, gate, down
    for (size_t k : {0, 1, 2, 3}) tensors.push_back({read(p[k]), Tensor(), {}, files});
    tensors.push_back({read(p[4]), Tensor(), {read(p[5])}, files});  // [up; gate]
    tensors.push_back({read(p[6]), Tensor(), {}, files});
  }
  L.units.resize(static_cast<size_t>(units_.size()));  // their tensors stay undefined: the streamer holds them
  streamer_->park_mapped(static_cast<int>(layer), std::move(tensors));
}

bool Qwen3VlTextModel::streams(int64_t layer) const {
  return streamer_ && layer >= 0 && layer < static_cast<int64_t>(streamed_.size()) &&
         streamed_[static_cast<size_t>(layer)];
}

void Qwen3VlTextModel::park_units(int64_t layer, Layer& L) {
  std::vector<Tensor> tensors;
  tensors.reserve(L.units.size() * kUnitTensors);
  for (Unit& u : L.units)
    for (Tensor* t : {&u.q, &u.k, &u.v, &u.o, &u.up_gate, &u.down}) {
      bytes_streamed_ += t->nbytes();
      tensors.push_back(std::move(*t));
      *t = Tensor();
    }
  streamer_->park(static_cast<int>(layer), std::move(tensors));
}

void Qwen3VlTextModel::start_streaming() {
  if (!streamer_) return;
  streamer_->start();
  spdlog::info("Qwen3-VL text tower{}: streamed from {}: {}",
               comm_ && comm_->size() > 1 ? fmt::format(" rank {}", tp_rank_) : "",
               park_source_ == ParkSource::mapped ? "the checkpoint at each copy" : "page-locked copies",
               streamer_->stats().summary());
}

void Qwen3VlTextModel::stop_streaming() {
  if (streamer_) streamer_->stop();
}

int64_t Qwen3VlTextModel::layers_streamed() const {
  return streamer_ ? streamer_->stats().streamed : 0;
}

LayerStreamStats Qwen3VlTextModel::stream_stats() const {
  return streamer_ ? streamer_->stats() : LayerStreamStats{};
}

Qwen3VlTextModel::LayerHold::LayerHold(const Qwen3VlTextModel& m, int64_t layer)
    : index_(static_cast<int>(layer)), layer_(&m.layers_[static_cast<size_t>(layer)]) {
  if (!m.streams(layer)) return;
  const std::vector<Tensor> w = m.streamer_->acquire(index_);
  streamer_ = m.streamer_.get();
  H3_ASSERT(w.size() == layer_->units.size() * kUnitTensors, "Qwen3-VL text layer {}: {} streamed tensors for {} units",
            layer, w.size(), layer_->units.size());
  views_.in_norm = layer_->in_norm;
  views_.q_norm = layer_->q_norm;
  views_.k_norm = layer_->k_norm;
  views_.post_norm = layer_->post_norm;
  views_.units.resize(layer_->units.size());
  for (size_t i = 0; i < views_.units.size(); ++i) {
    Unit& u = views_.units[i];
    const Tensor* t = &w[i * kUnitTensors];
    u.q = t[0], u.k = t[1], u.v = t[2], u.o = t[3], u.up_gate = t[4], u.down = t[5];
  }
  layer_ = &views_;
}

void Qwen3VlTextModel::LayerHold::release() {
  if (!streamer_) return;
  views_.units.clear();  // the views die with the slot's contents
  LayerStreamer* s = streamer_;
  streamer_ = nullptr;
  s->release(index_);
}

Qwen3VlTextModel::LayerHold::~LayerHold() {
  try {
    release();
  } catch (const std::exception& e) {
    spdlog::error("Qwen3-VL text layer {}: releasing its streamed weights failed: {}", index_, e.what());
  }
}

}  // namespace h3

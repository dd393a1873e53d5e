// DiT weight streaming (model/dit/streaming.h): which blocks stay resident, the parking of the others as they load,
// their leases in the forward and the modulation tables of the streamed blocks.
#include "model/dit/streaming.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/ops.h"

namespace h3 {

void DitModel::start_streaming(const DitStreaming& s) {
  const int n = config_.num_layers;
  H3_CHECK(s.resident_blocks >= -1,
           "DiT streaming: {} resident blocks asked for; give 0..{} (the others stream from host memory) or -1 "
           "(all resident)",
           s.resident_blocks, n);
  if (s.resident_blocks < 0 || s.resident_blocks >= n) return;
  H3_CHECK(s.ring_slots >= 1,
           "DiT streaming: a ring of {} slots; give at least 1 (2 or more overlap copies with compute)", s.ring_slots);
  resident_ = spread_resident(n, s.resident_blocks);
  LayerStreamer::Options opt;
  opt.slots = s.ring_slots;
  // The summary is logged once, when the model (and every copy of it) is gone.
  streamer_ = std::shared_ptr<LayerStreamer>(new LayerStreamer(dev_, "DiT", n, opt), [](LayerStreamer* p) {
    spdlog::info("DiT weight streaming: {}", p->stats().summary());
    delete p;
  });
}

// Moves block n's large tensors into the streamer: its page-locked host record holds their bytes, and the device
// memory goes back as the last reference goes (the loader holds none), so loading peaks at the resident blocks
// plus one.
void DitModel::park_block(size_t n) {
  Block& b = blocks_[n];
  std::vector<Tensor> tensors;
  tensors.reserve(kDitStreamedTensors.size());
  for (Tensor Block::*field : kDitStreamedTensors) {
    tensors.push_back(std::move(b.*field));
    b.*field = Tensor();
  }
  streamer_->park(static_cast<int>(n), std::move(tensors));
}

void DitModel::finish_streaming() {
  if (!streamer_) return;
  streamer_->start();  // the first copies run during the first prologue
  const LayerStreamStats s = streamer_->stats();
  spdlog::info("DiT: {} of {} blocks resident, {} streamed through {} slots of {} on the device ({} page-locked)",
               resident_blocks(), config_.num_layers, s.streamed, s.slots,
               format_byte_size(static_cast<int64_t>(s.slot_bytes / std::max(s.slots, 1))),
               format_byte_size(static_cast<int64_t>(s.parked_bytes)));
}

int DitModel::resident_blocks() const {
  if (resident_.empty()) return config_.num_layers;
  int r = 0;
  for (bool b : resident_) r += b ? 1 : 0;
  return r;
}

LayerStreamStats DitModel::streaming_stats() const {
  if (streamer_) return streamer_->stats();
  LayerStreamStats s;
  s.layers = config_.num_layers;
  return s;
}

DitModel::BlockLease::BlockLease(const DitModel& m, size_t n) : n_(static_cast<int>(n)) {
  if (!m.block_streamed(n)) {
    block_ = &m.blocks_[n];
    return;
  }
  streamer_ = m.streamer_.get();
  streamed_ = m.blocks_[n];  // the resident norms and scales
  std::vector<Tensor> w = streamer_->acquire(n_);
  for (size_t i = 0; i < kDitStreamedTensors.size(); ++i) streamed_.*kDitStreamedTensors[i] = std::move(w[i]);
  block_ = &streamed_;
}

DitModel::BlockLease::~BlockLease() {
  if (!streamer_) return;
  try {
    streamer_->release(n_);
  } catch (const std::exception& e) {
    spdlog::error("DiT block {}: releasing its streamed weights failed: {}", n_, e.what());
  }
}

// A streamed block's table, computed once its weights are on the device: the same kernel on the same bytes as
// adaln_tables gives a resident block, and in tensor mode the same gather of each rank's rows (one per streamed
// block, in block order on every rank, after the resident blocks' one).
Tensor DitModel::block_table(const Block& b, const Tensor& ada_in) const {
  Tensor own = round_if_bf16(ops::linear(ada_in, b.adaln_w, &b.adaln_b));
  if (plan_.K == 1) return own;
  return gather_tables({std::move(own)}).front();
}

}  // namespace h3

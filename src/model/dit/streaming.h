// DiT weight streaming inside the model (DitStreaming in model/dit/dit.h; the ring itself: io/layer_stream.h).
#pragma once
#include <array>
#include <cstddef>

#include "model/dit/dit.h"

namespace h3 {

// The per-block tensors that travel, in the order they are parked and acquired; the norms and the FP8 attention
// scales (a few KiB) stay resident.
inline constexpr std::array<Tensor DitModel::Block::*, 8> kDitStreamedTensors = {
    &DitModel::Block::to_q,  &DitModel::Block::to_k,   &DitModel::Block::to_v,    &DitModel::Block::to_out,
    &DitModel::Block::ff_in, &DitModel::Block::ff_out, &DitModel::Block::adaln_w, &DitModel::Block::adaln_b};

// Block n's weights while its kernels are queued: the resident block itself, or for a streamed block a copy of it
// whose large tensors are views into the ring (acquired on construction, which makes the compute queue wait for
// their copy; released when the lease goes, once the block's kernels are queued).
class DitModel::BlockLease {
 public:
  BlockLease(const DitModel& m, size_t n);
  ~BlockLease();
  BlockLease(const BlockLease&) = delete;
  BlockLease& operator=(const BlockLease&) = delete;
  const Block& block() const { return *block_; }

 private:
  LayerStreamer* streamer_ = nullptr;  // null for a resident block
  int n_ = 0;
  Block streamed_;
  const Block* block_ = nullptr;
};

}  // namespace h3

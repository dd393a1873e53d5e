// Host buffers for the exchanges of device tensors over a communicator that moves host memory (MPI: ranks sharing a
// GPU, or a build without NCCL). A device tensor is copied into one buffer, travels, and the result comes back to
// the device from the other. The two buffers are kept for the owner's life and grown to the largest exchange;
// page-locked when a GPU backend is started, so the copies run at the link's page-locked rate.
//
// Why: the DiT's tensor mode over MPI (two ranks on one GPU) exchanges 203-406 MB twice per sub-layer. Fresh
// pageable host tensors for each (copied in, received into, then freed) cost their page faults and the pageable
// copy rate at every exchange, 200 times a forward.
#pragma once
#include <cstddef>

#include "core/tensor.h"

namespace h3 {

class HostStage {
 public:
  HostStage() = default;
  ~HostStage();
  HostStage(const HostStage&) = delete;
  HostStage& operator=(const HostStage&) = delete;

  // A host tensor of `dt` and `shape` in buffer `slot` (0 or 1), its contents undefined. It stays valid until the
  // next call for the same slot.
  Tensor view(int slot, DType dt, const Shape& shape);
  // The device tensor `t` copied into buffer `slot` (returns when the copy has landed); valid as view()'s.
  Tensor copy_in(int slot, const Tensor& t);
  // Bytes held now (both buffers).
  size_t bytes() const { return bufs_[0].bytes + bufs_[1].bytes; }

 private:
  struct Buffer {
    void* p = nullptr;
    size_t bytes = 0;
    bool pinned = false;
  };
  static void release(Buffer& b);
  Buffer bufs_[2];
};

}  // namespace h3

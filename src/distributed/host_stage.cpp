#include "distributed/host_stage.h"

#include <cstdlib>
#include <memory>

#include "core/device.h"
#include "core/error.h"

namespace h3 {

HostStage::~HostStage() {
  for (auto& b : bufs_) release(b);
}

void HostStage::release(Buffer& b) {
  if (!b.p) return;
  if (b.pinned)
    device_hooks().pinned_release(b.p);
  else
    std::free(b.p);
  b = Buffer{};
}

Tensor HostStage::view(int slot, DType dt, const Shape& shape) {
  H3_ASSERT(slot == 0 || slot == 1, "host stage slot {}", slot);
  Buffer& b = bufs_[slot];
  const size_t need = static_cast<size_t>(shape_numel(shape)) * dtype_size(dt);
  if (b.bytes < need) {
    release(b);
    const bool pinned = have_device_backend() && device_hooks().pinned_alloc != nullptr;
    void* p = pinned ? device_hooks().pinned_alloc(need) : std::malloc(need);
    H3_CHECK(p != nullptr, "out of host memory: {} bytes for an exchange's host buffer", need);
    b = Buffer{p, need, pinned};
  }
  // A view without an owner: the buffer outlives it by this class's contract.
  return Tensor(dt, shape, std::shared_ptr<const void>(), b.p, Device::cpu);
}

Tensor HostStage::copy_in(int slot, const Tensor& t) {
  H3_ASSERT(t.on_device() && t.scale() == nullptr, "host stage: {} is not an unscaled device tensor", t.describe());
  Tensor h = view(slot, t.dtype(), t.shape());
  if (t.nbytes() > 0) device_hooks().copy(h.raw(), false, t.raw(), true, t.nbytes());
  return h;
}

}  // namespace h3

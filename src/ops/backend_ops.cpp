#include "ops/backend_ops.h"

#include <atomic>

#include "core/error.h"

namespace h3::ops {

namespace {
// One device backend per process (the GPU backend of this build); written once when it starts.
std::atomic<const BackendOps*> g_device{nullptr};
}  // namespace

bool has_entry(const BackendOps& ops, size_t i) {
  size_t n = 0;
  bool found = false;
#define H3_OP_HAS(name, ret, params) \
  if (n++ == i) found = ops.name != nullptr;
  H3_BACKEND_OPS(H3_OP_HAS)
#undef H3_OP_HAS
  return found;
}

void register_backend(const BackendOps& ops) {
  H3_ASSERT(ops.device != Device::cpu, "register_backend: the CPU backend is built in, not registered");
  g_device.store(&ops);
}

bool backend_present(Device device) {
  return device == Device::cpu || g_device.load() != nullptr;
}

const BackendOps& backend_for(Device device, const char* op) {
  if (device == Device::cpu) return cpu_backend();
  const BackendOps* d = g_device.load();
  if (!d) fail("op '{}' got a GPU tensor but no GPU backend is running", op);
  return *d;
}

}  // namespace h3::ops

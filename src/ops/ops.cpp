// The front door of ops/ops.h's device-wide calls: procedural weights made on a device, and the device's memory.
#include "ops/ops.h"

#include "ops/checks.h"

namespace h3::ops {

Tensor procedural(uint64_t base, double scale, double offset, const Shape& shape, Device device) {
  const BackendOps& be = backend_for(device, "procedural");
  for (int64_t d : shape) H3_ASSERT(d >= 0, "procedural: negative dimension in {}", shape_str(shape));
  return H3_OP_CALL(be, procedural, base, scale, offset, shape);
}

size_t device_total_bytes(Device device) {
  if (!backend_present(device)) return 0;
  const BackendOps& be = backend_for(device, "device_total_bytes");
  return be.total_bytes ? be.total_bytes() : 0;
}

int64_t device_budget_bytes(Device device) {
  if (!backend_present(device)) return 0;
  const BackendOps& be = backend_for(device, "device_budget_bytes");
  return be.budget_bytes ? be.budget_bytes() : 0;
}

int64_t device_in_use_bytes(Device device) {
  if (!backend_present(device)) return 0;
  const BackendOps& be = backend_for(device, "device_in_use_bytes");
  return be.in_use_bytes ? be.in_use_bytes() : 0;
}

}  // namespace h3::ops

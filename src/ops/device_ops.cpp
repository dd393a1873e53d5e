#include "ops/device_ops.h"

#include "core/error.h"

namespace h3::ops {

namespace {
DeviceOps g_ops;
bool g_registered = false;
}  // namespace

void register_device_ops(const DeviceOps& ops) {
  g_ops = ops;
  g_registered = true;
}

const DeviceOps& device_ops(const char* op) {
  if (!g_registered) fail("op '{}' got a GPU tensor but no GPU backend is running", op);
  return g_ops;
}

}  // namespace h3::ops

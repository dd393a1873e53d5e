#include "core/device.h"

#include "core/error.h"

namespace h3 {

namespace {
DeviceHooks g_hooks;
bool g_registered = false;
}  // namespace

void register_device_hooks(const DeviceHooks& hooks) {
  g_hooks = hooks;
  g_registered = true;
}

bool have_device_backend() {
  return g_registered;
}

const DeviceHooks& device_hooks() {
  if (!g_registered)
    fail(
        "a GPU tensor was asked for, but no GPU backend is running (build with the CUDA toolkit present and "
        "start it with --device cuda on a machine with an NVIDIA GPU)");
  return g_hooks;
}

ScopedDeviceHooks::ScopedDeviceHooks(const DeviceHooks& hooks) : previous_(g_hooks), had_(g_registered) {
  register_device_hooks(hooks);
}

ScopedDeviceHooks::~ScopedDeviceHooks() {
  g_hooks = previous_;
  g_registered = had_;
}

}  // namespace h3

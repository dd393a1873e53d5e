#include "backend/energy.h"

#include <dlfcn.h>

#include <memory>

#include "core/error.h"
#include "core/log.h"

namespace h3 {

std::optional<uint64_t> EnergyCounter::read() const {
  if (!read_mj) return std::nullopt;
  return read_mj();
}

EnergySpan energy_span(std::optional<uint64_t> start_mj, std::optional<uint64_t> end_mj, int forwards, double seconds) {
  H3_ASSERT(forwards > 0 && seconds > 0, "energy over {} forwards in {} s", forwards, seconds);
  if (!start_mj || !end_mj || *end_mj < *start_mj) return {};
  const double joules = static_cast<double>(*end_mj - *start_mj) / 1000.0;
  return {joules, joules / forwards, joules / seconds};
}

namespace {

// The few NVML entry points used, declared from NVML's public API reference: nvmlReturn_t is an int enum whose
// NVML_SUCCESS is 0, nvmlDevice_t an opaque pointer; energy in millijoules, power limits in milliwatts.
struct NvmlDeviceOpaque;
using NvmlDevice = NvmlDeviceOpaque*;
using NvmlReturn = int;

struct Nvml {
  void* lib = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*by_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*enforced_limit)(NvmlDevice, unsigned int*) = nullptr;
  NvmlDevice device = nullptr;
  bool warned = false;

  std::string error(NvmlReturn r) const { return fmt::format("NVML error {} ({})", r, error_string(r)); }
  ~Nvml() {
    if (shutdown) shutdown();  // nvmlInit_v2 succeeded: NVML counts its inits
  }
};

template <typename F>
bool bind(void* lib, const char* name, F& fn) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  return fn != nullptr;
}

}  // namespace

EnergyCounter nvml_energy_counter(const std::string& pci_bus_id) {
  EnergyCounter c;
  auto n = std::make_shared<Nvml>();
  // The handle stays open for the process's life (NVML keeps threads and state of its own).
  n->lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!n->lib) {
    c.absent = fmt::format("libnvidia-ml.so.1 (the NVIDIA driver's NVML) not loaded: {}", dlerror());
    return c;
  }
  decltype(n->shutdown) shutdown = nullptr;
  if (!bind(n->lib, "nvmlInit_v2", n->init) || !bind(n->lib, "nvmlShutdown", shutdown) ||
      !bind(n->lib, "nvmlErrorString", n->error_string) ||
      !bind(n->lib, "nvmlDeviceGetHandleByPciBusId_v2", n->by_bus_id) ||
      !bind(n->lib, "nvmlDeviceGetTotalEnergyConsumption", n->total_energy)) {
    c.absent =
        "libnvidia-ml.so.1 lacks nvmlInit_v2, nvmlDeviceGetHandleByPciBusId_v2 or "
        "nvmlDeviceGetTotalEnergyConsumption (a driver older than Volta's)";
    return c;
  }
  bind(n->lib, "nvmlDeviceGetEnforcedPowerLimit", n->enforced_limit);  // optional: only printed
  if (NvmlReturn r = n->init(); r != 0) {
    c.absent = fmt::format("nvmlInit_v2: error {}", r);
    return c;
  }
  n->shutdown = shutdown;
  // CUDA's "0000:19:00.0" is one of the forms NVML parses (domain:bus:device.function, each in hexadecimal).
  if (NvmlReturn r = n->by_bus_id(pci_bus_id.c_str(), &n->device); r != 0) {
    c.absent = fmt::format("no NVML device at PCI bus id '{}': {}", pci_bus_id, n->error(r));
    return c;
  }
  unsigned long long mj = 0;
  if (NvmlReturn r = n->total_energy(n->device, &mj); r != 0) {
    c.absent = fmt::format("GPU {} has no readable energy counter (Volta or later, not a MIG slice): {}", pci_bus_id,
                           n->error(r));
    return c;
  }
  unsigned int mw = 0;
  if (n->enforced_limit && n->enforced_limit(n->device, &mw) == 0) c.power_limit_watts = mw / 1000.0;
  c.source = "NVML total energy, GPU " + pci_bus_id;
  c.read_mj = [n]() -> std::optional<uint64_t> {
    unsigned long long v = 0;
    if (NvmlReturn r = n->total_energy(n->device, &v); r != 0) {
      if (!n->warned) spdlog::warn("NVML energy counter: {}; the energy of this span is absent", n->error(r));
      n->warned = true;
      return std::nullopt;
    }
    return static_cast<uint64_t>(v);
  };
  return c;
}

}  // namespace h3

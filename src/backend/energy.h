// The energy a stretch of GPU work took, from the board's cumulative energy counter (NVML's
// nvmlDeviceGetTotalEnergyConsumption: millijoules since the driver loaded; Volta and later, not on a MIG slice).
// Under the DiT the board runs at its power cap, so its clock follows the power a kernel mix draws and seconds per
// forward move with the board; joules per forward is the figure that says whether a kernel change pays.
//
// The counter is data (EnergyCounter: a read function and why it is absent), so the arithmetic is tested on the CPU
// with a fake counter; nvml_energy_counter() is the real one, read through libnvidia-ml.so.1 loaded at run time (the
// NVML header is no build dependency). An absent counter or a failed read gives an absent figure, never a guess.
//
// Resolution: NVML advances the counter at its own update rate (tens of ms, undocumented), so the difference of two
// readings may be off by up to one update's energy. Over h3 bench's timed forwards (>= 3 of >= 0.8 s, >= 2.4 s at
// ~700 W) an update period of up to ~40 ms is < 2 % of the span; shorter spans are proportionally coarser.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

namespace h3 {

struct EnergyCounter {
  // The counter now, in millijoules; nullopt when this read failed. Empty when there is no counter.
  std::function<std::optional<uint64_t>()> read_mj;
  // Why there is no counter ("" when there is one): no NVML library, no such device, not supported on this GPU.
  std::string absent;
  // Where the readings come from ("NVML total energy, GPU 0000:19:00.0"), for the bench's header.
  std::string source;
  // The board's enforced power limit in watts, when NVML gave it.
  std::optional<double> power_limit_watts;

  // The counter now (millijoules), or nullopt without a counter or when the read fails.
  std::optional<uint64_t> read() const;
};

// The energy of `forwards` runs that took `seconds` in all, between the readings `start_mj` and `end_mj` (taken
// after the synchronize before the first run and after the one that ends the last). All absent when either reading
// is absent or the counter went backwards (the driver reloaded between them).
struct EnergySpan {
  std::optional<double> joules, joules_per_forward, mean_watts;
};
EnergySpan energy_span(std::optional<uint64_t> start_mj, std::optional<uint64_t> end_mj, int forwards, double seconds);

// The counter of the GPU at `pci_bus_id` (backend/backend.h: gpu_bus_id()) through NVML, loaded at run time. When
// the library, the device or its counter is unavailable, a counter without a read function whose `absent` says why.
EnergyCounter nvml_energy_counter(const std::string& pci_bus_id);

}  // namespace h3

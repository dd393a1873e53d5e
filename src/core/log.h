// Logging through spdlog; every line carries the rank once the process knows it.
#pragma once
#include <spdlog/spdlog.h>

namespace h3 {
// Sets the log pattern (with "[rank r/n]" when n > 1) and the level ("debug", "info", "warn", "error").
void log_setup(int rank, int world, const std::string& level);
}  // namespace h3

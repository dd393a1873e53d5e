#include "core/log.h"

#include <spdlog/sinks/stdout_color_sinks.h>

namespace h3 {

void log_setup(int rank, int world, const std::string& level) {
  auto logger = spdlog::stderr_color_mt("h3");
  spdlog::set_default_logger(logger);
  std::string who = world > 1 ? fmt::format("[rank {}/{}] ", rank, world) : "";
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ " + who + "%v");
  spdlog::set_level(spdlog::level::from_str(level));
}

}  // namespace h3

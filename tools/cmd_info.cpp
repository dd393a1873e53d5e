#include "commands.h"
namespace h3::cli {
Runner add_info(CLI::App& app) {
  app.add_subcommand("info", "describe a checkpoint");
  return [] { return 0; };
}
}  // namespace h3::cli

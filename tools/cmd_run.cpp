#include "commands.h"
namespace h3::cli {
Runner add_run(CLI::App& app) {
  app.add_subcommand("run", "a DiT forward on a procedural model");
  return [] { return 0; };
}
}  // namespace h3::cli

// h3: the command-line front end. Every flag also reads an environment variable H3_<FLAG>.
#include <cstdio>
#include <map>

#include "commands.h"
#include "core/error.h"
#include "core/log.h"

int main(int argc, char** argv) {
  CLI::App app{"h3-engine: MiniMax-H3 video+audio generation on CPUs and GPUs (version " H3_VERSION ")"};
  app.require_subcommand(1);
  std::string log_level = "info";
  app.add_option("--log-level", log_level, "debug, info, warn or error")->envname("H3_LOG_LEVEL");
  std::map<CLI::App*, h3::cli::Runner> runners;
  auto reg = [&](h3::cli::Runner (*add)(CLI::App&)) {
    size_t before = app.get_subcommands({}).size();
    auto run = add(app);
    runners[app.get_subcommands({}).at(before)] = run;
  };
  reg(h3::cli::add_verify);
  reg(h3::cli::add_info);
  reg(h3::cli::add_run);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  h3::log_setup(0, 1, log_level);
  try {
    for (auto& [sub, run] : runners)
      if (sub->parsed()) return run();
  } catch (const h3::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  }
  return 2;
}

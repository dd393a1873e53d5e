// `h3 serve` when libmicrohttpd or SQLite was not found at configure time: the commands exist and say what is missing.
#include "commands.h"
#include "core/error.h"

namespace h3::cli {
namespace {
Runner missing(CLI::App& app, const char* name) {
  auto* cmd = app.add_subcommand(name, "HTTP job server (not built: libmicrohttpd and SQLite were not found)");
  cmd->allow_extras();
  return [name = std::string(name)](const GlobalContext&) -> int {
    throw Error("h3 " + name +
                ": this h3 was built without libmicrohttpd and SQLite; install them (scripts/setup.sh installs the "
                "Debian packages libmicrohttpd-dev and libsqlite3-dev) and rebuild");
  };
}
}  // namespace

Runner add_serve(CLI::App& app) {
  return missing(app, "serve");
}
Runner add_serve_worker(CLI::App& app) {
  return missing(app, "serve-worker");
}

}  // namespace h3::cli

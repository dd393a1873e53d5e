// Usage errors, "did you mean", and the global options in each command's help (cli_habits.h).
#include "cli_habits.h"

#include <algorithm>
#include <iostream>
#include <sstream>

namespace h3::cli {

namespace {

// Optimal string alignment distance: insertions, deletions, substitutions and adjacent transpositions cost 1.
size_t edit_distance(const std::string& a, const std::string& b) {
  const size_t n = a.size(), m = b.size();
  std::vector<std::vector<size_t>> d(n + 1, std::vector<size_t>(m + 1));
  for (size_t i = 0; i <= n; ++i) d[i][0] = i;
  for (size_t j = 0; j <= m; ++j) d[0][j] = j;
  for (size_t i = 1; i <= n; ++i)
    for (size_t j = 1; j <= m; ++j) {
      const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
      d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
      if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
        d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
    }
  return d[n][m];
}

std::vector<const CLI::App*> visible_commands(const CLI::App& app) {
  std::vector<const CLI::App*> out;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App* s) { return !s->get_group().empty(); }))
    out.push_back(sub);
  return out;
}

const CLI::App* command_named(const CLI::App& app, const std::string& name) {
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->check_name(name)) return sub;
  return nullptr;
}

// The option `name` ("--seed", "-s") of the command or, as CLI11's fallthrough does, of the application.
const CLI::Option* find_option(const CLI::App& app, const CLI::App* cmd, const std::string& name) {
  if (cmd)
    if (const CLI::Option* o = cmd->get_option_no_throw(name)) return o;
  return app.get_option_no_throw(name);
}

void add_long_names(const CLI::App& from, std::vector<std::string>& out) {
  for (const CLI::Option* o : from.get_options())
    for (const std::string& l : o->get_lnames()) out.push_back("--" + l);
}

}  // namespace

std::string closest_word(const std::string& word, const std::vector<std::string>& candidates) {
  const size_t limit = word.size() <= 4 ? 1 : word.size() <= 8 ? 2 : 3;
  std::string best;
  size_t best_d = limit + 1;
  for (const std::string& c : candidates) {
    const size_t d = edit_distance(word, c);
    if (d < best_d) {
      best_d = d;
      best = c;
    }
  }
  return best;
}

std::string did_you_mean(const CLI::App& app, int argc, const char* const* argv) {
  std::ostringstream out;
  const CLI::App* cmd = nullptr;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--") break;
    if (a.size() > 1 && a[0] == '-') {
      const bool long_form = a.rfind("--", 0) == 0;
      const size_t eq = a.find('=');
      const std::string name = long_form ? a.substr(0, eq) : a.substr(0, 2);
      if (const CLI::Option* o = find_option(app, cmd, name)) {
        // A separate value follows an option that takes one ("--seed 5", "-s 5"; not "--seed=5" or "-s5").
        const bool inline_value = long_form ? eq != std::string::npos : a.size() > 2;
        if (o->get_type_size_max() > 0 && !inline_value) ++i;
        continue;
      }
      if (!long_form) continue;
      std::vector<std::string> names;
      add_long_names(app, names);
      if (cmd) add_long_names(*cmd, names);
      const std::string best = closest_word(name, names);
      if (!best.empty())
        out << "unknown option '" << name << "'" << (cmd ? " of '" + cmd->get_name() + "'" : std::string())
            << ": did you mean '" << best << "'?\n";
      // Its value, if it was meant to take one ("--rank 2 generate"), is not a command.
      if (eq == std::string::npos && i + 1 < argc && argv[i + 1][0] != '-' && !command_named(app, argv[i + 1])) ++i;
      continue;
    }
    if (cmd) continue;  // a positional argument of the command
    if ((cmd = command_named(app, a))) continue;
    std::vector<std::string> names;
    for (const CLI::App* sub : visible_commands(app)) names.push_back(sub->get_name());
    const std::string best = closest_word(a, names);
    out << "unknown command '" << a << "'"
        << (best.empty() ? std::string("; h3 --help lists the commands") : ": did you mean '" + best + "'?") << "\n";
    break;
  }
  return out.str();
}

int exit_on_parse_error(const CLI::App& app, const CLI::ParseError& e, int argc, const char* const* argv) {
  if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);
  const std::string hints = did_you_mean(app, argc, argv);
  if (hints.rfind("unknown command", 0) == 0) {  // CLI11 would only say that a command is required
    std::cerr << "error: " << hints;
    return kUsageError;
  }
  const CLI::App* cmd = nullptr;
  for (int i = 1; i < argc && !cmd; ++i) cmd = command_named(app, argv[i]);
  if (!cmd && std::string(e.what()).find("subcommand is required") != std::string::npos) {
    std::cerr << "error: give a command (h3 --help lists them, h3 COMMAND --help their options)\n" << hints;
    return kUsageError;
  }
  std::cerr << "error: " << e.what() << "\n"
            << hints << "(" << (cmd ? "h3 " + cmd->get_name() : std::string("h3")) << " --help lists the options)\n";
  return kUsageError;
}

void add_global_option_footers(CLI::App& app,
                               const std::vector<std::pair<std::string, std::vector<std::string>>>& globals) {
  std::vector<const CLI::Option*> all;
  for (const CLI::Option* o : app.get_options())
    if (!o->get_lnames().empty() && o->get_lnames()[0] != "help" && o->get_lnames()[0] != "version") all.push_back(o);
  for (CLI::App* sub : app.get_subcommands({})) {
    std::vector<const CLI::Option*> shown = all;
    for (const auto& [name, opts] : globals)
      if (name == sub->get_name()) {
        shown.clear();
        for (const CLI::Option* o : all)
          if (std::find(opts.begin(), opts.end(), "--" + o->get_lnames()[0]) != opts.end()) shown.push_back(o);
      }
    if (shown.empty()) continue;
    // (CLI11 prints a callback footer before the command's own footer text, if any.)
    sub->footer([shown]() {
      const CLI::Formatter format;  // the default one, as the options above are printed
      std::string text = "Global options (before or after the command):\n";
      for (const CLI::Option* o : shown) text += format.make_option(o, false);
      return text;
    });
  }
}

}  // namespace h3::cli

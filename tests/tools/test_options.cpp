// tools/options.h: the table of the options several commands take, checked as data and against what the built h3
// shows: every row's help text in every command that takes it, --precision with one text wherever it is taken, and
// no option that two commands take outside the table.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <algorithm>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "options.h"
#include "support/cli_run.h"

using h3::cli::OptionDef;
using h3::cli::OptionUse;
using h3::test::run_h3;

namespace {

// CLI11 prints an option as "  NAMES TYPE...", then its description from column 30: on the same line, or on the
// next one (indented 30 spaces) when the names and type take 30 columns or more.
constexpr size_t kDescriptionColumn = 30;

std::vector<std::string> split_names(const std::string& names) {
  std::vector<std::string> out;
  std::stringstream in(names);
  for (std::string n; std::getline(in, n, ',');) out.push_back(n);
  return out;
}

// One option as `h3 COMMAND --help` lists it.
struct HelpEntry {
  std::string names;        // "-s,--seed"
  std::string rest;         // the type, default and "(Env:...)" after the names
  std::string description;  // the help text
};

std::map<std::string, HelpEntry> parse_help(const std::string& text) {
  std::map<std::string, HelpEntry> out;  // by every name the option has
  std::vector<std::string> lines;
  std::stringstream in(text);
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& l = lines[i];
    if (l.rfind("  -", 0) != 0) continue;
    const size_t name_end = l.find(' ', 2);
    HelpEntry e;
    e.names = l.substr(2, name_end == std::string::npos ? std::string::npos : name_end - 2);
    const std::string indent(kDescriptionColumn, ' ');
    const bool next_line = i + 1 < lines.size() && lines[i + 1].rfind(indent, 0) == 0;
    const std::string head = next_line ? l : l.substr(0, kDescriptionColumn);
    e.rest = name_end == std::string::npos || name_end >= head.size() ? "" : head.substr(name_end);
    e.description = next_line                       ? lines[i + 1].substr(kDescriptionColumn)
                    : l.size() > kDescriptionColumn ? l.substr(kDescriptionColumn)
                                                    : "";
    for (const std::string& n : split_names(e.names)) out.emplace(n, e);
  }
  return out;
}

// `h3 ARGS` once per test program (each run starts the binary: a fraction of a second).
const h3::test::CliResult& run_once(const std::string& args) {
  static std::map<std::string, h3::test::CliResult> done;
  auto it = done.find(args);
  if (it == done.end()) it = done.emplace(args, run_h3(args)).first;
  return it->second;
}

// The options of COMMAND (its own, before the global ones in the footer).
std::map<std::string, HelpEntry> command_options(const std::string& command) {
  const h3::test::CliResult r = run_once(command + " --help");
  EXPECT_EQ(r.status, 0) << command << " --help:\n" << r.out;
  return parse_help(r.out.substr(0, r.out.find("\nGlobal options")));
}

// Every command of the binary: those `h3 --help` lists and the internal ones.
std::vector<std::string> all_commands() {
  const h3::test::CliResult r = run_once("--help");
  std::vector<std::string> out = {"serve-worker", "probe-media"};
  std::stringstream in(r.out.substr(r.out.find("Subcommands:")));
  std::string line;
  std::getline(in, line);
  while (std::getline(in, line) && line.rfind("  ", 0) == 0) out.push_back(line.substr(2, line.find(' ', 2) - 2));
  return out;
}

// h3 built without the HTTP server has a stub serve and serve-worker with no options (tools/without_serve).
bool built(const std::string& command) {
  return run_once(command + " --help").out.find("(not built:") == std::string::npos;
}

}  // namespace

TEST(OptionTable, EveryRowIsComplete) {
  std::set<const OptionDef*> seen;
  for (const OptionDef* d : h3::cli::option_table()) {
    EXPECT_TRUE(seen.insert(d).second) << d->names << " is listed twice";
    EXPECT_EQ(d->names.rfind("-", 0), 0u) << d->names;
    EXPECT_FALSE(d->help.empty()) << d->names << " has no help text";
    EXPECT_EQ(d->help.find('\n'), std::string::npos) << d->names << ": one line of help";
    EXPECT_TRUE(d->env.empty() || d->env.rfind("H3_", 0) == 0) << d->names << ": " << d->env;
    // A row is for an option several commands take; one only one command takes lives in that command's file.
    EXPECT_GE(d->uses.size(), 2u) << d->names;
    std::set<std::string> commands;
    for (const OptionUse& u : d->uses) {
      EXPECT_TRUE(commands.insert(u.command).second) << d->names << " lists " << u.command << " twice";
      for (const std::string& v : u.values)
        EXPECT_NE(std::find(d->values.begin(), d->values.end(), v), d->values.end())
            << d->names << " in " << u.command << ": " << v << " is not one of the row's values";
    }
  }
}

TEST(OptionTable, NoCommandTakesTwoRowsOfOneName) {
  std::map<std::pair<std::string, std::string>, std::string> owner;  // (command, name) -> the row's names
  for (const OptionDef* d : h3::cli::option_table())
    for (const OptionUse& u : d->uses)
      for (const std::string& n : split_names(d->names)) {
        const auto [it, fresh] = owner.emplace(std::pair{u.command, n}, d->names);
        EXPECT_TRUE(fresh) << u.command << " takes " << n << " from two rows: " << it->second << " and " << d->names;
      }
}

TEST(OptionTable, EveryCommandShowsItsRowsAsTheTableSays) {
  std::map<std::string, std::map<std::string, HelpEntry>> helps;
  for (const OptionDef* d : h3::cli::option_table())
    for (const OptionUse& u : d->uses) {
      if (!helps.count(u.command)) helps[u.command] = command_options(u.command);
      if (u.command.rfind("serve", 0) == 0 && !built(u.command)) continue;  // the stub: no options
      const std::string first = split_names(d->names).back();
      const auto it = helps[u.command].find(first);
      ASSERT_NE(it, helps[u.command].end()) << "h3 " << u.command << " --help does not list " << d->names;
      const HelpEntry& e = it->second;
      EXPECT_EQ(e.names, d->names) << u.command;
      EXPECT_EQ(e.description, d->help) << u.command << " " << d->names;
      const bool shows_env = e.rest.find("(Env:" + d->env + ")") != std::string::npos;
      // A knob's row names its variable in the help text: the knob table reads it, not CLI11.
      EXPECT_EQ(shows_env, u.env && !d->env.empty() && d->knob.empty())
          << u.command << " " << d->names << ": " << e.rest;
      EXPECT_EQ(e.rest.find("REQUIRED") != std::string::npos, u.required) << u.command << " " << d->names;
    }
}

// The commands that take a precision, as the issue that made the table lists them; one help text in all of them.
TEST(CliOptions, PrecisionHasOneHelpTextInEveryCommandThatTakesIt) {
  std::string text;
  for (const char* command : {"generate", "serve", "serve-worker", "decode", "verify", "parity", "vae-parity",
                              "forward", "info", "bench", "bench-decode"}) {
    if (std::string(command).rfind("serve", 0) == 0 && !built(command)) continue;
    const auto options = command_options(command);
    const auto it = options.find("--precision");
    ASSERT_NE(it, options.end()) << "h3 " << command << " --help has no --precision";
    EXPECT_FALSE(it->second.description.empty()) << command;
    if (text.empty()) text = it->second.description;
    EXPECT_EQ(it->second.description, text) << command;
  }
  for (const char* v : {"f64", "f32", "bf16", "fp8", "generate", "decode", "info"})
    EXPECT_NE(text.find(v), std::string::npos) << v << " missing in the help text: " << text;
}

// An option two commands take is one row of the table, so that it cannot drift apart in one of them.
TEST(CliOptions, AnOptionOfSeveralCommandsIsARowOfTheTable) {
  std::map<std::string, std::vector<std::string>> takers;  // long name -> commands
  for (const std::string& command : all_commands())
    for (const auto& [name, entry] : command_options(command))
      if (name.rfind("--", 0) == 0 && name != "--help") takers[name].push_back(command);
  for (const auto& [name, commands] : takers) {
    if (commands.size() < 2) continue;
    for (const std::string& command : commands) {
      bool in_table = false;
      for (const OptionDef* d : h3::cli::option_table()) {
        const auto names = split_names(d->names);
        if (std::find(names.begin(), names.end(), name) == names.end()) continue;
        for (const OptionUse& u : d->uses) in_table = in_table || u.command == command;
      }
      EXPECT_TRUE(in_table) << name << " is taken by " << commands.size() << " commands but " << command
                            << " defines it itself: make it a row of tools/options.cpp";
    }
  }
}

// --max-device-memory: one row (a knob of core/knobs.h), taken by the commands that start the GPU to run models.
TEST(CliOptions, MaxDeviceMemoryIsTakenByTheCommandsThatRunModelsOnTheGpu) {
  const OptionDef& d = h3::cli::opt::max_device_memory;
  EXPECT_EQ(d.knob, "max_device_memory");
  EXPECT_EQ(d.env, "H3_MAX_DEVICE_MEMORY");
  std::set<std::string> commands;
  for (const OptionUse& u : d.uses) commands.insert(u.command);
  EXPECT_EQ(commands, (std::set<std::string>{"generate", "serve", "bench", "decode", "bench-decode"}));
  for (const char* c : {"generate", "serve", "bench", "decode", "bench-decode"}) {
    if (std::string(c) == "serve" && !built(c)) continue;
    const auto options = command_options(c);
    const auto it = options.find("--max-device-memory");
    ASSERT_NE(it, options.end()) << "h3 " << c << " --help does not list --max-device-memory";
    EXPECT_NE(it->second.description.find("GPU memory this process may use"), std::string::npos) << c;
    EXPECT_NE(it->second.description.find("H3_MAX_DEVICE_MEMORY"), std::string::npos) << c;
  }
  // Not a global option, and not taken by a command that runs no model on the GPU.
  EXPECT_EQ(run_once("--help").out.find("--max-device-memory"), std::string::npos);
  const h3::test::CliResult info = run_h3("info procedural:mini --max-device-memory 24G");
  EXPECT_EQ(info.status, 2) << info.out;
}

// --host-memory: one row, taken by the commands that plan host memory for streamed layers (plan, generate, serve and
// its workers); a bad size is a usage error at once, naming the flag.
TEST(CliOptions, HostMemoryIsOneRowAndRefusesABadSize) {
  const OptionDef& d = h3::cli::opt::host_memory;
  EXPECT_EQ(d.env, "H3_HOST_MEMORY");
  std::set<std::string> commands;
  for (const OptionUse& u : d.uses) commands.insert(u.command);
  EXPECT_EQ(commands, (std::set<std::string>{"plan", "generate", "serve", "serve-worker"}));
  for (const char* c : {"plan", "generate", "serve"}) {
    if (std::string(c) == "serve" && !built(c)) continue;
    const auto options = command_options(c);
    const auto it = options.find("--host-memory");
    ASSERT_NE(it, options.end()) << "h3 " << c << " --help does not list --host-memory";
    EXPECT_NE(it->second.description.find("memory-mapped checkpoint"), std::string::npos) << c;
  }
  const h3::test::CliResult bad = run_h3("generate --prompt x --host-memory lots");
  EXPECT_EQ(bad.status, 2) << bad.out;
  EXPECT_NE(bad.out.find("--host-memory"), std::string::npos) << bad.out;
  EXPECT_NE(bad.out.find("64GB"), std::string::npos) << "says how to write a size: " << bad.out;
}

// A bad size is a usage error (exit 2) naming where it came from and how to write one; the flag beats the variable.
TEST(CliOptions, MaxDeviceMemoryRefusesABadSizeAndTheFlagBeatsTheVariable) {
  const std::string missing = " decode /nonexistent/h3-latents.safetensors -o /nonexistent/h3-out.mp4";
  const h3::test::CliResult bad_flag = run_h3("--log-level info" + missing + " --max-device-memory lots");
  EXPECT_EQ(bad_flag.status, 2) << bad_flag.out;
  EXPECT_NE(bad_flag.out.find("error: --max-device-memory=lots"), std::string::npos) << bad_flag.out;
  EXPECT_NE(bad_flag.out.find("24G"), std::string::npos) << "says how to write a size: " << bad_flag.out;
  const h3::test::CliResult zero = run_h3("generate --max-device-memory 0");
  EXPECT_EQ(zero.status, 2) << zero.out;
  EXPECT_NE(zero.out.find("--max-device-memory=0: no memory at all"), std::string::npos) << zero.out;

  ::setenv("H3_MAX_DEVICE_MEMORY", "lots", 1);  // the child h3 reads it
  const h3::test::CliResult bad_env = run_h3("--log-level info" + missing);
  ::setenv("H3_MAX_DEVICE_MEMORY", "16GiB", 1);
  const h3::test::CliResult from_env = run_h3("--log-level info" + missing);
  const h3::test::CliResult flag_wins = run_h3("--log-level info" + missing + " --max-device-memory 24G");
  ::unsetenv("H3_MAX_DEVICE_MEMORY");
  EXPECT_EQ(bad_env.status, 2) << bad_env.out;
  EXPECT_NE(bad_env.out.find("error: H3_MAX_DEVICE_MEMORY=lots"), std::string::npos) << bad_env.out;
  // Past the knobs, decode fails on the missing latents file (exit 2) after logging the options it runs with.
  EXPECT_NE(from_env.out.find("max_device_memory=16GiB (H3_MAX_DEVICE_MEMORY)"), std::string::npos) << from_env.out;
  EXPECT_NE(flag_wins.out.find("max_device_memory=24G (--max-device-memory)"), std::string::npos) << flag_wins.out;
  EXPECT_EQ(flag_wins.out.find("16GiB"), std::string::npos) << flag_wins.out;
}

// Runs the built h3 binary (H3_BIN_DIR) with arguments and captures its exit status and combined output; shared by
// the test files that drive the CLI end to end.
#pragma once
#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <string>

namespace h3::test {

struct CliResult {
  int status;
  std::string out;
};

inline CliResult run_h3(const std::string& args) {
  const std::string cmd = std::string(H3_BIN_DIR) + "/h3 " + args + " 2>&1";
  CliResult r{0, ""};
  FILE* p = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf{};
  while (p && fgets(buf.data(), buf.size(), p)) r.out += buf.data();
  const int st = p ? pclose(p) : -1;
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

}  // namespace h3::test

// The h3 binary end to end: exit codes, the PASS/FAIL last line, clear errors on bad input.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <initializer_list>
#include <string>

#include "support/cli_run.h"
#include "support/golden.h"

namespace {

using Result = h3::test::CliResult;
using h3::test::run_h3;

// `h3 args` fails (a non-zero exit) with output that names each of `says`.
void expect_refused(const std::string& args, std::initializer_list<std::string> says) {
  const Result r = run_h3(args);
  EXPECT_NE(r.status, 0) << r.out;
  for (const std::string& s : says) EXPECT_NE(r.out.find(s), std::string::npos) << "h3 " << args << ": " << r.out;
}

std::string last_line(const std::string& s) {
  auto end = s.find_last_not_of('\n');
  auto begin = s.rfind('\n', end);
  return s.substr(begin == std::string::npos ? 0 : begin + 1, end - (begin == std::string::npos ? 0 : begin + 1) + 1);
}

}  // namespace

TEST(Cli, ForwardOnTheProceduralMiniModel) {
  Result r = run_h3("forward");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_EQ(last_line(r.out), "OK") << r.out;
}

TEST(Cli, VerifyPassesAndFailsWithTheRightExitCode) {
  const auto file = h3::test::golden("dit-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  Result ok = run_h3("verify " + file + " --precision f32");
  EXPECT_EQ(ok.status, 0) << ok.out;
  EXPECT_EQ(last_line(ok.out).rfind("PASS", 0), 0u) << ok.out;
  Result tight = run_h3("verify " + file + " --precision f32 --tol 1e-12");
  EXPECT_EQ(tight.status, 1) << tight.out;
  EXPECT_EQ(last_line(tight.out).rfind("FAIL", 0), 0u) << tight.out;
  const auto layouts = h3::test::golden("layouts.safetensors");
  H3_REQUIRE_GOLDEN(layouts);
  Result lay = run_h3("verify " + layouts);
  EXPECT_EQ(lay.status, 0) << lay.out;
  EXPECT_EQ(last_line(lay.out).rfind("PASS", 0), 0u) << lay.out;
}

TEST(Cli, TruncatedFileGivesOneClearError) {
  const auto file = h3::test::golden("dit-mini.safetensors");
  H3_REQUIRE_GOLDEN(file);
  auto tmp = std::filesystem::temp_directory_path() / "h3_cli_truncated.safetensors";
  {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), {});
    std::ofstream out(tmp, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  Result r = run_h3("verify " + tmp.string());
  std::filesystem::remove(tmp);
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.out.find("truncated"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(tmp.string()), std::string::npos) << r.out;
}

TEST(Cli, InfoReadsOnlyHeaders) {
  Result r = run_h3("info procedural:full");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("50 blocks + 2 refiner, 56 heads x 128"), std::string::npos) << r.out;
  expect_refused("info /nonexistent/model", {"/nonexistent/model"});
}

TEST(Cli, TooManyOrTooFewFramesAreRefused) {
  expect_refused("forward --frames 100000", {"at most 345 frames"});
  expect_refused("forward --frames 0", {"num_frames must be positive"});
}

TEST(Cli, BadGeometryIsRefused) {
  expect_refused("forward --height 70", {"70", "32"});
}

// The CLI habits of llama.cpp's tools (tools/cli_habits.h), through the built binary: --version, did-you-mean,
// exit status 2 for every usage error, the global options in each command's help, short flags and the one-line
// timing summary of `h3 generate`.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "support/cli_run.h"
#include "support/scratch_dir.h"

using h3::test::CliResult;
using h3::test::run_h3;

namespace {

bool has(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

}  // namespace

TEST(CliHabits, VersionSaysWhatWasCompiledIn) {
  const CliResult r = run_h3("--version");
  EXPECT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(has(r.out, "h3 " H3_VERSION " (git ")) << r.out;
  EXPECT_FALSE(has(r.out, "git unknown")) << "the build runs in a git checkout: " << r.out;
  for (const char* line :
       {"\nbuilt: ", "\nCPU: yes (BLAS: ", "\nCUDA: ", "\nNCCL: ", "\ncuDNN: ", "\nFFmpeg: ", "\nMPI: ", "\nserve: "})
    EXPECT_TRUE(has(r.out, line)) << line << " missing in:\n" << r.out;
#if H3_HAVE_CUDA
  EXPECT_TRUE(has(r.out, "CUDA: yes (toolkit ")) << r.out;
#else
  EXPECT_TRUE(has(r.out, "CUDA: no")) << r.out;
#endif
  EXPECT_FALSE(has(r.out, "subcommand is required")) << r.out;
}

TEST(CliHabits, MisspeltCommandsAndOptionsGetASuggestionAndStatus2) {
  const std::pair<const char*, const char*> cases[] = {
      {"genrate", "did you mean 'generate'?"},
      {"gnerate --prompt x", "did you mean 'generate'?"},
      {"serv --store /tmp/x", "did you mean 'serve'?"},
      {"generate --promt x", "did you mean '--prompt'?"},
      {"generate --prompt x --sed 4", "did you mean '--seed'?"},
      {"--rank 2 generate --prompt x", "did you mean '--ranks'?"},
      {"generate --prompt x --devise cuda", "did you mean '--device'?"},
      {"info procedural:mini --qkv-layuot blocked", "did you mean '--qkv-layout'?"},
      {"--verison", "did you mean '--version'?"},
  };
  for (const auto& [args, hint] : cases) {
    const CliResult r = run_h3(args);
    EXPECT_EQ(r.status, 2) << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, hint)) << args << "\n" << r.out;
  }
  const CliResult far = run_h3("xyzzy");
  EXPECT_EQ(far.status, 2) << far.out;
  EXPECT_TRUE(has(far.out, "error: unknown command 'xyzzy'; h3 --help lists the commands")) << far.out;
  const CliResult none = run_h3("");
  EXPECT_EQ(none.status, 2) << none.out;
  EXPECT_TRUE(has(none.out, "error: give a command")) << none.out;
}

TEST(CliHabits, EveryUsageErrorExits2) {
  for (const char* args : {"",                                             // no command
                           "generate --steps abc --prompt x",              // not a number
                           "generate --precision f16 --prompt x",          // not one of the choices
                           "generate --prompt",                            // missing value
                           "verify",                                       // missing positional argument
                           "--ranks 0 info procedural:mini",               // out of range
                           "--device tpu info procedural:mini",            // not one of the choices
                           "serve --port 70000 --store /tmp/h3-x",         // out of range
                           "generate --prompt x --width 100 --height 64",  // a refused request
                           "info procedural:mini extra-argument"}) {
    const CliResult r = run_h3(args);
    EXPECT_EQ(r.status, 2) << "h3 " << args << "\n" << r.out;
    EXPECT_TRUE(has(r.out, "error")) << "h3 " << args << "\n" << r.out;
  }
  const CliResult help = run_h3("--help");
  EXPECT_EQ(help.status, 0) << help.out;
}

TEST(CliHabits, EachCommandsHelpListsTheGlobalOptionsItUses) {
  const CliResult gen = run_h3("generate --help");
  EXPECT_EQ(gen.status, 0) << gen.out;
  for (const char* opt : {"Global options", "--ranks", "--device", "--timeout", "--log-level", "--transport",
                          "--deterministic", "-p,--prompt", "-o,--output", "-m,--model", "-s,--seed"})
    EXPECT_TRUE(has(gen.out, opt)) << opt << " missing in:\n" << gen.out;
  const CliResult info = run_h3("info --help");
  EXPECT_TRUE(has(info.out, "--ranks")) << info.out;
  EXPECT_FALSE(has(info.out, "--device")) << "info never starts a device:\n" << info.out;
  const CliResult serve = run_h3("serve --help");
  EXPECT_TRUE(has(serve.out, "--ranks")) << serve.out;
  EXPECT_TRUE(has(serve.out, "-m,--model-dir")) << serve.out;
}

TEST(CliHabits, GenerateTakesShortFlagsAndSaysWhereTheTimeWent) {
  h3::test::ScratchDir dir;
  const auto out = dir / "a.mp4";
  const CliResult r =
      run_h3("--log-level warn generate -p 'a lamp in the rain' -W 128 -H 64 --steps 3 -s 9 -o " + out.string());
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_TRUE(std::filesystem::exists(out)) << r.out;
  EXPECT_TRUE(has(r.out, "\"seed\": 9")) << r.out;
  EXPECT_TRUE(has(r.out, "\"width\": 128")) << r.out;
  // One line: every phase with its share of the total, the denoise's time per DiT call, the total.
  const size_t at = r.out.find("timings: load ");
  ASSERT_NE(at, std::string::npos) << r.out;
  const std::string line = r.out.substr(at, r.out.find('\n', at) - at);
  for (const char* part : {"%)", "denoise ", "per DiT call", "decode_video ", ", total "})
    EXPECT_TRUE(has(line, part)) << part << " missing in: " << line;
}

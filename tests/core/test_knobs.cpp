// core/knobs.h: the table's rows, flags over the environment, errors that name the flag or the variable, the
// summary, and the flags handed on as variables. Only GPU knobs are changed here (no CPU op reads them), and the
// environment's values are restored at the end of every test.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/knobs.h"
#include "support/error_of.h"

namespace h3 {
namespace {

// Sets (or unsets, for nullptr) one variable for a test's duration and reloads the knobs from the environment after.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) had_ = true, old_ = old;
    value ? ::setenv(name, value, 1) : ::unsetenv(name);
  }
  ~ScopedEnv() {
    had_ ? ::setenv(name_.c_str(), old_.c_str(), 1) : ::unsetenv(name_.c_str());
    load_knobs();
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_, old_;
  bool had_ = false;
};

// Expects load_knobs(overrides), with the environment as it is, to refuse with a message that names each of `says`.
void expect_refused(const std::map<std::string, std::string>& overrides, std::initializer_list<std::string> says) {
  const std::string e = test::error_of([&] { load_knobs(overrides); });
  for (const std::string& s : says)
    EXPECT_NE(e.find(s), std::string::npos) << "a refusal naming " << s << ": " << (e.empty() ? "accepted" : e);
}

TEST(Knobs, EveryRowIsComplete) {
  std::set<std::string> names, envs, flags;
  for (const KnobInfo& k : knob_table()) {
    EXPECT_TRUE(names.insert(k.name).second) << "two knobs named " << k.name;
    EXPECT_TRUE(envs.insert(k.env).second) << "two knobs read " << k.env;
    EXPECT_NE(std::string(k.help), "") << k.name << " has no help line";
    if (*k.flag) {
      EXPECT_TRUE(flags.insert(k.flag).second) << "two knobs have the flag " << k.flag;
      EXPECT_EQ(std::string(k.flag).rfind("--", 0), 0u) << k.flag;
      EXPECT_EQ(std::string(k.env_only), "") << k.name << " has a flag and a reason not to";
    } else {
      EXPECT_NE(std::string(k.env_only), "") << k.name << " has neither a flag nor the reason it has none";
    }
  }
}

TEST(Knobs, FlagOverridesTheEnvironment) {
  ScopedEnv env("H3_GEMM_TUNE", "0");
  load_knobs();
  EXPECT_FALSE(knobs().gemm_tune);
  EXPECT_NE(knobs_summary().find("gemm_tune=0 (H3_GEMM_TUNE)"), std::string::npos) << knobs_summary();
  load_knobs({{"gemm_tune", "1"}, {"fp8_attention", "require"}});
  EXPECT_TRUE(knobs().gemm_tune);
  EXPECT_EQ(knobs().fp8_attention, Fp8Attention::require);
  EXPECT_NE(knobs_summary().find("fp8_attention=require (--fp8-attention)"), std::string::npos) << knobs_summary();
}

TEST(Knobs, FlagsAreHandedOnAsTheirVariables) {
  ScopedEnv env("H3_FP8_FAST_ACCUM", nullptr);
  load_knobs({{"fp8_fast_accum", "0"}});
  const std::vector<std::string> e = knob_flag_environment();
  EXPECT_NE(std::find(e.begin(), e.end(), "H3_FP8_FAST_ACCUM=0"), e.end());
  load_knobs();
  EXPECT_TRUE(knob_flag_environment().empty()) << "no flag given, nothing to hand on";
}

TEST(Knobs, NumericsFollowTheKnobs) {
  ScopedEnv env("H3_ATTENTION_FP8", "off");
  load_knobs({{"fp8_fast_accum", "0"}});
  const Numerics n = numerics_from_knobs(true);
  EXPECT_TRUE(n.deterministic);
  EXPECT_TRUE(n.fp8_row_scales());
  EXPECT_EQ(n.fp8_attention, Fp8Attention::off);
  EXPECT_FALSE(n.fp8_fast_accum);
  EXPECT_FALSE(numerics_from_knobs(false).fp8_row_scales());
}

TEST(Knobs, BadValuesNameTheFlagOrTheVariable) {
  ScopedEnv env("H3_FP8_FAST_ACCUM", "maybe");
  expect_refused({}, {"H3_FP8_FAST_ACCUM=maybe"});
  ::setenv("H3_FP8_FAST_ACCUM", "1", 1);
  expect_refused({{"fp8_attention", "sometimes"}}, {"--fp8-attention=sometimes", "auto, off or require"});
}

// --max-device-memory / H3_MAX_DEVICE_MEMORY (core/byte_size.h sizes): unset is 0, "what is free at start".
TEST(Knobs, MaxDeviceMemoryIsASizeFromTheFlagOrTheVariable) {
  ScopedEnv env("H3_MAX_DEVICE_MEMORY", nullptr);
  load_knobs();
  EXPECT_EQ(knobs().max_device_bytes, 0);
  load_knobs({{"max_device_memory", "24G"}});
  EXPECT_EQ(knobs().max_device_bytes, int64_t{24} << 30);
  const std::vector<std::string> e = knob_flag_environment();
  EXPECT_NE(std::find(e.begin(), e.end(), "H3_MAX_DEVICE_MEMORY=24G"), e.end()) << "h3 serve hands it to its workers";
  ::setenv("H3_MAX_DEVICE_MEMORY", "16GB", 1);
  load_knobs();
  EXPECT_EQ(knobs().max_device_bytes, int64_t{16000000000});
  EXPECT_NE(knobs_summary().find("max_device_memory=16GB (H3_MAX_DEVICE_MEMORY)"), std::string::npos)
      << knobs_summary();
}

TEST(Knobs, BadMaxDeviceMemoryNamesTheFlagOrTheVariable) {
  ScopedEnv env("H3_MAX_DEVICE_MEMORY", "lots");
  expect_refused({}, {"H3_MAX_DEVICE_MEMORY=lots", "24G"});  // the example says how to write one
  ::unsetenv("H3_MAX_DEVICE_MEMORY");
  for (const char* bad : {"0", "-1G", "24Q", ""})
    expect_refused({{"max_device_memory", bad}}, {std::string("--max-device-memory=") + bad});
}

// --gemm-algos: auto by default (a file per GPU model in the user's cache folder, tools/main.cpp), none, or a path;
// the folder follows XDG's rule (an absolute XDG_CACHE_HOME, else HOME's .cache).
TEST(Knobs, GemmAlgosDefaultToTheUsersCacheFolder) {
  ScopedEnv env("H3_GEMM_ALGOS", nullptr);
  load_knobs();
  EXPECT_EQ(knobs().gemm_algos, "auto");
  load_knobs({{"gemm_algos", "none"}});
  EXPECT_EQ(knobs().gemm_algos, "none");
  expect_refused({{"gemm_algos", ""}}, {"--gemm-algos", "auto, none or a path"});
  EXPECT_EQ(user_cache_dir("/xdg/cache", "/home/u"), "/xdg/cache/h3");
  EXPECT_EQ(user_cache_dir("relative/cache", "/home/u"), "/home/u/.cache/h3") << "XDG: a relative path is ignored";
  EXPECT_EQ(user_cache_dir(nullptr, "/home/u"), "/home/u/.cache/h3");
  EXPECT_EQ(user_cache_dir("", ""), "");
  EXPECT_EQ(user_cache_dir(nullptr, nullptr), "");
  {
    ScopedEnv xdg("XDG_CACHE_HOME", "/somewhere/cache");
    load_knobs();
    EXPECT_EQ(knobs().cache_dir, "/somewhere/cache/h3");
  }
}

}  // namespace
}  // namespace h3

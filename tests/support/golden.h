// Where the golden reference files live, and a loud skip when they are absent (a user's clone without shared/).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include "io/safetensors.h"

namespace h3::test {

inline std::string golden(const std::string& name) {
  return std::string(H3_GOLDEN_DIR) + "/" + name;
}

}  // namespace h3::test

#define H3_REQUIRE_GOLDEN(path)                                                                 \
  do {                                                                                          \
    if (!std::filesystem::exists(path))                                                         \
      GTEST_SKIP() << "SKIPPED LOUDLY: golden file missing: " << (path)                         \
                   << " (the reference tensors live in ../shared/golden next to the checkout)"; \
  } while (0)

// `var`: the golden file `name` opened (its path in var_path), or the test skipped loudly when the file is missing.
#define H3_OPEN_GOLDEN(var, name)                          \
  const std::string var##_path = ::h3::test::golden(name); \
  H3_REQUIRE_GOLDEN(var##_path);                           \
  ::h3::SafeTensors var = ::h3::SafeTensors::open(var##_path)

namespace h3::test {

// The fixture of a suite whose tests read one golden file: SetUp skips loudly when the file is absent, else opens
// it (file()). A suite declares `class Suite : public GoldenFileTest { ... Suite() : GoldenFileTest(name) {} };`.
class GoldenFileTest : public ::testing::Test {
 protected:
  explicit GoldenFileTest(const std::string& name) : path_(golden(name)) {}
  void SetUp() override {
    H3_REQUIRE_GOLDEN(path_);
    file_ = std::make_unique<SafeTensors>(SafeTensors::open(path_));
  }
  const std::string& path() const { return path_; }
  const SafeTensors& file() const { return *file_; }

 private:
  std::string path_;
  std::unique_ptr<SafeTensors> file_;
};

}  // namespace h3::test

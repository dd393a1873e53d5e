// Where the golden reference files live, and a loud skip when they are absent (a user's clone without shared/).
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

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

// Errors: what went wrong, where (file, key, rank) and what to do. The library throws h3::Error on bad input;
// only internal invariants use H3_ASSERT.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>

namespace h3 {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

template <typename... Args>
[[noreturn]] void fail(fmt::format_string<Args...> f, Args&&... args) {
  throw Error(fmt::format(f, std::forward<Args>(args)...));
}

[[noreturn]] void assert_failed(const char* expr, const char* file, int line, const std::string& msg);

}  // namespace h3

#define H3_ASSERT(cond, ...)                                                                 \
  do {                                                                                       \
    if (!(cond)) ::h3::assert_failed(#cond, __FILE__, __LINE__, ::fmt::format(__VA_ARGS__)); \
  } while (0)

#define H3_CHECK(cond, ...)               \
  do {                                    \
    if (!(cond)) ::h3::fail(__VA_ARGS__); \
  } while (0)

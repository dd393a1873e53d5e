#include "core/error.h"

namespace h3 {

void assert_failed(const char* expr, const char* file, int line, const std::string& msg) {
  throw Error(fmt::format("internal error: {} ({}:{}): {} -- please report this", expr, file, line, msg));
}

}  // namespace h3

// The message of the h3::Error a callable throws ("" when it throws none), for tests of error messages.
#pragma once
#include <string>

#include "core/error.h"

namespace h3::test {

template <typename Fn>
std::string error_of(Fn&& fn) {
  try {
    fn();
  } catch (const h3::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace h3::test

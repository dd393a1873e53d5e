// The JSON the bench commands write: one profile region's totals (core/profile.h), and the file itself.
#pragma once
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/profile.h"

namespace h3 {

inline nlohmann::json profile_json(const profile::Total& t) {
  return {{"seconds", t.seconds},
          {"spans", t.spans},
          {"host_seconds", t.host_seconds},
          {"idle_before_seconds", t.idle_before},
          {"host_only", t.host_only}};
}

// Writes a bench's rows to `path` (indented, with a final newline) and says so.
inline void write_bench_json(const std::string& path, const nlohmann::json& all) {
  std::ofstream(path) << all.dump(2) << "\n";
  std::printf("wrote %s\n", path.c_str());
}

}  // namespace h3

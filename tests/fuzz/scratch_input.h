// For fuzz targets whose code under test reads a path, not bytes: the input written to this process's own scratch
// file (one per target and process, overwritten by each input).
#pragma once
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

namespace h3::fuzz {

// "/tmp/h3-fuzz-<target>-<pid><ext>" holding the input; "" when it cannot be written (the input is skipped).
inline std::string scratch_input(const char* target, const char* ext, const uint8_t* data, size_t size) {
  const std::string path = std::string("/tmp/h3-fuzz-") + target + "-" + std::to_string(::getpid()) + ext;
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) return "";
  const bool ok = std::fwrite(data, 1, size, f) == size;
  return std::fclose(f) == 0 && ok ? path : "";
}

}  // namespace h3::fuzz

// Fuzz target: the safetensors header parser. Every input must either parse into tensors that lie inside the
// data region or throw h3::Error; anything else (another exception, a broken invariant, a sanitizer report) is
// a bug. Run by tests/fuzz/driver.cpp in CI, or by libFuzzer (tests/fuzz/README.md).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"
#include "io/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::map<std::string, h3::TensorInfo> infos;
  std::vector<std::string> keys;
  std::map<std::string, std::string> metadata;
  size_t data_offset = 0;
  try {
    h3::safetensors_parse("fuzz-input", reinterpret_cast<const std::byte*>(data), size, infos, keys, metadata,
                          data_offset);
  } catch (const h3::Error&) {
    return 0;  // a clean rejection
  }
  if (data_offset < 8 || data_offset > size || keys.size() != infos.size()) std::abort();
  const size_t data_size = size - data_offset;
  for (const auto& [key, ti] : infos) {
    if (ti.begin > ti.end || ti.end > data_size) std::abort();
    size_t numel = 1;
    for (int64_t d : ti.shape) numel *= static_cast<size_t>(d);
    if (numel * h3::dtype_size(ti.dtype) != ti.end - ti.begin) std::abort();
  }
  return 0;
}

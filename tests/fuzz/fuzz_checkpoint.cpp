// Fuzz target: checkpoint, LoRA and quantization metadata. The input is written to a file and opened as a DiT
// checkpoint (key detection, comfy_quant JSON, quantized weights dequantized) and as a LoRA for the mini model;
// every outcome is a checkpoint or an h3::Error.
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/error.h"
#include "model/dit/checkpoint.h"
#include "model/dit/config.h"
#include "model/dit/lora.h"

namespace {
std::string scratch_file() {
  static const std::string path = "/tmp/h3-fuzz-checkpoint-" + std::to_string(::getpid()) + ".safetensors";
  return path;
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = scratch_file();
  if (std::FILE* f = std::fopen(path.c_str(), "wb")) {
    std::fwrite(data, 1, size, f);
    std::fclose(f);
  } else {
    return 0;
  }
  try {
    h3::DitCheckpoint ck = h3::DitCheckpoint::open(path);
    for (const auto& [key, shape] : ck.config().parameters()) {
      (void)shape;
      (void)ck.get(key);
    }
  } catch (const h3::Error&) {
  }
  try {
    static const h3::DitConfig mini = *h3::DitConfig::named("mini");
    (void)h3::LoraFile::open(path, 1.0, mini, -1);
  } catch (const h3::Error&) {
  }
  return 0;
}

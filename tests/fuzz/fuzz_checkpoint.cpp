// Fuzz target: checkpoint, LoRA and quantization metadata. The input is written to a file and opened as a DiT
// checkpoint (key detection, comfy_quant JSON, quantized weights dequantized) and as a LoRA for the mini model;
// every outcome is a checkpoint or an h3::Error.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "model/dit/checkpoint.h"
#include "model/dit/config.h"
#include "model/dit/lora.h"
#include "scratch_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = h3::fuzz::scratch_input("checkpoint", ".safetensors", data, size);
  if (path.empty()) return 0;
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

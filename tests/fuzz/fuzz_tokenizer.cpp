// Fuzz target: tokenizer.json loading and encoding (model/qwen3vl/tokenizer.h), behind the generic deep-JSON
// guard the loader is to call (core/json_limits.h). Every input loads or is refused with h3::Error; a loaded
// tokenizer encodes a short text without crashing.
#include <cstddef>
#include <cstdint>
#include <string>

#include "core/error.h"
#include "core/json_limits.h"
#include "model/qwen3vl/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  if (h3::json_nesting_depth(text, h3::kJsonMaxDepth + 1) > h3::kJsonMaxDepth) return 0;  // the loader refuses
  try {
    const h3::Tokenizer tok = h3::Tokenizer::from_json_text(text, "fuzz tokenizer.json");
    (void)tok.encode("a lighthouse at dusk, <|vision_start|> 12 \xe2\x80\x94 end");
  } catch (const h3::Error&) {
  }
  return 0;
}

// Fuzz target: the bounded JSON parser every outside JSON goes through (core/json_limits.h) and the request
// resolution behind POST /v1/videos and `h3 generate` (pipeline/request.h): any input is parsed or refused
// with h3::Error, never a crash, and an accepted request resolves or is refused with h3::Error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "core/json_limits.h"
#include "pipeline/request.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j;
  try {
    j = h3::parse_json_bounded(text, "fuzz", 32);
  } catch (const h3::Error&) {
    return 0;
  }
  if (h3::json_nesting_depth(text) > 32) std::abort();  // the guard let a deeper text through
  (void)j.dump();                                       // recursive: safe only because the depth is bounded
  if (!j.is_object()) return 0;
  // Files named by the input are not opened: media and LoRA fields are dropped (their own targets cover them).
  for (const char* k : {"first_image", "last_image", "references", "loras"}) j.erase(k);
  try {
    const h3::GenerateRequest req = h3::GenerateRequest::from_json(j);
    const h3::ResolvedRequest r = h3::resolve(req);
    (void)h3::ResolvedRequest::from_json(r.to_json());
  } catch (const h3::Error&) {
  } catch (const nlohmann::json::exception&) {
  }
  return 0;
}

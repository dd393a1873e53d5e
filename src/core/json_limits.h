// Bounded JSON parsing for every JSON text the engine reads from outside (safetensors metadata, model configs,
// tokenizer files, shard indexes, HTTP request bodies): nesting is measured by a loop over the text before
// anything is built, so a deeply nested input is refused without recursing over it (nlohmann's serializer,
// comparisons and our own walkers recurse), and duplicate object keys are refused instead of silently keeping
// the last one. Every refusal is an h3::Error naming `what`.
#pragma once
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace h3 {

// Deepest real configs nest 6 levels (tokenizer.json's normalizer/pre_tokenizer sequences); requests 3.
inline constexpr int kJsonMaxDepth = 64;

// The deepest nesting of arrays/objects outside strings, counting stops at `stop_at` (returned then).
int json_nesting_depth(std::string_view text, int stop_at = 1 << 30);

// Parses `text`, refusing nesting deeper than `max_depth`, duplicate keys inside one object (when
// `unique_keys`) and anything that is not JSON. `what` names the source in errors ("tokenizer x.json").
nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, int max_depth = kJsonMaxDepth,
                                  bool unique_keys = true);

}  // namespace h3

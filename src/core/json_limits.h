// Bounded JSON parsing for every JSON text the engine reads from outside (safetensors metadata, model configs,
// tokenizer files, shard indexes, HTTP request bodies): nesting is measured by a loop over the text before
// anything is built, so a deeply nested input is refused without recursing over it (nlohmann's serializer,
// comparisons and our own walkers recurse), and duplicate object keys are refused instead of silently keeping
// the last one. Parsing is linear in the text. Every refusal is an h3::Error naming `what`. Nothing else in src/
// or tools/ calls nlohmann's parser (CTest source.json_parse checks).
#pragma once
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace h3 {

// Deepest real configs nest 6 levels (tokenizer.json's normalizer/pre_tokenizer sequences); requests 3.
inline constexpr int kJsonMaxDepth = 64;

// The deepest nesting of arrays/objects outside strings, counting stops at `stop_at` (returned then).
int json_nesting_depth(std::string_view text, int stop_at = 1 << 30);

// Parses `text`, refusing nesting deeper than `max_depth`, duplicate keys inside one object (when
// `unique_keys`), more than `max_values` values (scalars, arrays and objects: a request body holds a few hundred),
// numbers longer than 1000 characters and anything that is not JSON. `what` names the source in errors ("tokenizer
// x.json"); an error names the byte where the text went wrong and never quotes more than a few hundred bytes of it.
// Linear in the text: the value is built as the text is read (json_limits.cpp says why not nlohmann's callback
// parser), and a token that is refused is refused in one pass over it.
nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, int max_depth = kJsonMaxDepth,
                                  bool unique_keys = true, size_t max_values = SIZE_MAX);

}  // namespace h3

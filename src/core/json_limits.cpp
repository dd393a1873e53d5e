// Bounded JSON parsing (core/json_limits.h).
#include "core/json_limits.h"

#include <string>
#include <unordered_set>
#include <vector>

#include "core/error.h"

namespace h3 {

int json_nesting_depth(std::string_view text, int stop_at) {
  int depth = 0, worst = 0;
  bool in_string = false, escaped = false;
  for (char c : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > worst) worst = depth;
      if (worst >= stop_at) return stop_at;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return worst;
}

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, int max_depth, bool unique_keys) {
  const int depth = json_nesting_depth(text, max_depth + 1);
  H3_CHECK(depth <= max_depth, "{}: JSON nested deeper than {} levels; refused (is the file what it should be?)", what,
           max_depth);
  // One key set per open object; a key seen twice in the same object is refused.
  std::vector<std::unordered_set<std::string>> open;
  std::string duplicate;
  auto callback = [&](int, nlohmann::json::parse_event_t event, nlohmann::json& value) {
    using E = nlohmann::json::parse_event_t;
    if (!unique_keys) return true;
    if (event == E::object_start) {
      open.emplace_back();
    } else if (event == E::object_end) {
      if (!open.empty()) open.pop_back();
    } else if (event == E::key && !open.empty()) {
      if (!open.back().insert(value.get<std::string>()).second && duplicate.empty())
        duplicate = value.get<std::string>();
    }
    return true;
  };
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text.begin(), text.end(), callback, true, false);
  } catch (const nlohmann::json::exception& e) {
    fail("{}: not valid JSON ({})", what, e.what());
  }
  H3_CHECK(duplicate.empty(), "{}: the key \"{}\" appears twice in one JSON object; refused (which one is meant?)",
           what, duplicate.substr(0, 200));
  return j;
}

}  // namespace h3

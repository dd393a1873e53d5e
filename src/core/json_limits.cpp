// Bounded JSON parsing (core/json_limits.h).
//
// Why a DOM builder of our own over nlohmann's SAX interface: nlohmann's callback parser (the one that lets a
// caller see keys, which the duplicate-key check needs) scans every element of the enclosing container each time
// an object ends, looking for a discarded value to erase. That is quadratic: 350k `{}` in one array (1 MB) took
// 29 s, 40k tensors in a safetensors header 35 s. The builder below puts each value in place as it arrives, so a
// parse costs O(bytes + values x log(keys per object)).
#include "core/json_limits.h"

#include <string>
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

namespace {

using json = nlohmann::json;

// nlohmann's SAX events -> a json value, refusing (returning false, which stops the parse at once) a duplicate key,
// nesting past the limit and more values than allowed.
class BoundedBuilder {
 public:
  BoundedBuilder(int max_depth, size_t max_values, bool unique_keys)
      : max_depth_(max_depth), max_values_(max_values), unique_keys_(unique_keys) {}

  bool null() { return put(json(nullptr)); }
  bool boolean(bool v) { return put(json(v)); }
  bool number_integer(json::number_integer_t v) { return put(json(v)); }
  bool number_unsigned(json::number_unsigned_t v) { return put(json(v)); }
  bool number_float(json::number_float_t v, const json::string_t&) { return put(json(v)); }
  bool string(json::string_t& v) { return put(json(std::move(v))); }
  bool binary(json::binary_t& v) { return put(json::binary(std::move(v))); }
  bool start_object(size_t) { return open(json::value_t::object); }
  bool start_array(size_t) { return open(json::value_t::array); }
  bool end_object() { return close(); }
  bool end_array() { return close(); }
  bool key(json::string_t& k) {
    json& object = *open_.back();
    if (unique_keys_ && object.contains(k)) {
      problem_ = Problem::duplicate;
      detail_ = std::move(k);
      return false;
    }
    key_ = std::move(k);
    return true;
  }
  bool parse_error(size_t, const std::string&, const nlohmann::detail::exception& e) {
    problem_ = Problem::syntax;
    detail_ = e.what();
    return false;
  }

  enum class Problem { none, syntax, duplicate, depth, values };
  Problem problem() const { return problem_; }
  const std::string& detail() const { return detail_; }
  json& result() { return root_; }

 private:
  // Places `v` in the innermost open container (or as the root); returns where it went.
  json* place(json v) {
    if (++values_ > max_values_) {
      problem_ = Problem::values;
      return nullptr;
    }
    if (open_.empty()) {
      root_ = std::move(v);
      return &root_;
    }
    json& parent = *open_.back();
    if (parent.is_array()) {
      parent.push_back(std::move(v));
      return &parent.back();
    }
    json& slot = parent[key_];
    slot = std::move(v);
    return &slot;
  }
  bool put(json v) { return place(std::move(v)) != nullptr; }
  bool open(json::value_t type) {
    if (static_cast<int>(open_.size()) >= max_depth_) {
      problem_ = Problem::depth;
      return false;
    }
    json* where = place(json(type));
    if (!where) return false;
    // The pointer stays valid: its container only grows again after this value is closed.
    open_.push_back(where);
    return true;
  }
  bool close() {
    open_.pop_back();
    return true;
  }

  const int max_depth_;
  const size_t max_values_;
  const bool unique_keys_;
  size_t values_ = 0;
  json root_;
  std::vector<json*> open_;
  std::string key_;
  Problem problem_ = Problem::none;
  std::string detail_;
};

}  // namespace

nlohmann::json parse_json_bounded(std::string_view text, const std::string& what, int max_depth, bool unique_keys,
                                  size_t max_values) {
  // Measured first, by a loop: the refusal names the depth and costs nothing but one pass.
  const int depth = json_nesting_depth(text, max_depth + 1);
  H3_CHECK(depth <= max_depth, "{}: JSON nested deeper than {} levels; refused (is the file what it should be?)", what,
           max_depth);
  BoundedBuilder b(max_depth, max_values, unique_keys);
  try {
    json::sax_parse(text.begin(), text.end(), &b, json::input_format_t::json, true, false);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", what, e.what());
  }
  switch (b.problem()) {
    case BoundedBuilder::Problem::none:
      break;
    case BoundedBuilder::Problem::syntax:
      fail("{}: not valid JSON ({})", what, b.detail());
    case BoundedBuilder::Problem::duplicate:
      fail("{}: the key \"{}\" appears twice in one JSON object; refused (which one is meant?)", what,
           b.detail().substr(0, 200));
    case BoundedBuilder::Problem::depth:
      fail("{}: JSON nested deeper than {} levels; refused (is the file what it should be?)", what, max_depth);
    case BoundedBuilder::Problem::values:
      fail("{}: more than {} JSON values; refused (nothing this reads holds that many)", what, max_values);
  }
  return std::move(b.result());
}

}  // namespace h3

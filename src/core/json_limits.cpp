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

// nlohmann's message for a token it refuses quotes the whole token read so far ("last read: '...'"), built in a
// few copies: a 64 MiB string with one bad byte at its end cost ~1 s of CPU and came back to the client as a 64 MiB
// error. So the tokens it could refuse only after reading them whole are checked first, by a loop naming the byte:
// strings (a control character, an escape that is not JSON's or a lone surrogate, ill-formed UTF-8 by RFC 3629,
// no closing quote) and numbers (no real one is longer than kMaxNumberChars: 64 Mi digits were ~1 s of strtod).
// What is left for nlohmann to refuse is a short token, and its message is cut to kMaxDetail besides.
constexpr size_t kMaxNumberChars = 1000;
constexpr size_t kMaxDetail = 300;

// 0..0xFFFF, or -1 unless p[at..at+4) are four hex digits.
long hex4(const unsigned char* p, size_t n, size_t at) {
  if (at + 4 > n) return -1;
  long v = 0;
  for (size_t k = at; k < at + 4; ++k) {
    const unsigned char h = p[k];
    const int d = h >= '0' && h <= '9'   ? h - '0'
                  : h >= 'a' && h <= 'f' ? h - 'a' + 10
                  : h >= 'A' && h <= 'F' ? h - 'A' + 10
                                         : -1;
    if (d < 0) return -1;
    v = v * 16 + d;
  }
  return v;
}

// The length of the well-formed UTF-8 sequence at p (lead byte >= 0x80), or 0 (RFC 3629, table 3-7 of Unicode).
size_t utf8_length(const unsigned char* p, size_t n) {
  const unsigned char b = p[0];
  auto cont = [&](size_t k, unsigned char lo = 0x80, unsigned char hi = 0xBF) {
    return k < n && p[k] >= lo && p[k] <= hi;
  };
  if (b >= 0xC2 && b <= 0xDF) return cont(1) ? 2 : 0;
  if (b == 0xE0) return cont(1, 0xA0) && cont(2) ? 3 : 0;
  if ((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) return cont(1) && cont(2) ? 3 : 0;
  if (b == 0xED) return cont(1, 0x80, 0x9F) && cont(2) ? 3 : 0;
  if (b == 0xF0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (b >= 0xF1 && b <= 0xF3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b == 0xF4) return cont(1, 0x80, 0x8F) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

void check_tokens(std::string_view text, const std::string& what) {
  const auto* p = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  auto refuse = [&](const char* why, size_t at) { fail("{}: not valid JSON ({} at byte {})", what, why, at); };
  size_t i = 0;
  while (i < n) {
    const unsigned char c = p[i];
    if (c == '-' || (c >= '0' && c <= '9')) {
      const size_t start = i;
      while (i < n &&
             ((p[i] >= '0' && p[i] <= '9') || p[i] == '-' || p[i] == '+' || p[i] == '.' || p[i] == 'e' || p[i] == 'E'))
        ++i;
      if (i - start > kMaxNumberChars) refuse("a number of more than 1000 characters", start);
      continue;
    }
    if (c != '"') {
      ++i;
      continue;
    }
    const size_t start = i++;
    for (;;) {
      if (i >= n) refuse("a string that is never closed", start);
      const unsigned char d = p[i];
      if (d == '"') {
        ++i;
        break;
      }
      if (d < 0x20) refuse("a control character inside a string", i);
      if (d >= 0x80) {
        const size_t len = utf8_length(p + i, n - i);
        if (len == 0) refuse("ill-formed UTF-8 inside a string", i);
        i += len;
        continue;
      }
      if (d != '\\') {
        ++i;
        continue;
      }
      const unsigned char e = i + 1 < n ? p[i + 1] : 0;
      if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't') {
        i += 2;
        continue;
      }
      if (e != 'u') refuse("an escape that is not JSON's", i);
      const long v = hex4(p, n, i + 2);
      if (v < 0) refuse("a \\u escape without four hex digits", i);
      if (v >= 0xDC00 && v <= 0xDFFF) refuse("a \\u escape of a lone low surrogate", i);
      if (v >= 0xD800 && v <= 0xDBFF) {  // a high surrogate: its low one must follow
        const long low = i + 7 < n && p[i + 6] == '\\' && p[i + 7] == 'u' ? hex4(p, n, i + 8) : -1;
        if (low < 0xDC00 || low > 0xDFFF) refuse("a \\u escape of a lone high surrogate", i);
        i += 6;
      }
      i += 6;
    }
  }
}

std::string cut(const std::string& s) {
  return s.size() <= kMaxDetail ? s : s.substr(0, kMaxDetail) + "...";
}

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
    detail_ = cut(e.what());
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
  check_tokens(text, what);
  BoundedBuilder b(max_depth, max_values, unique_keys);
  try {
    json::sax_parse(text.begin(), text.end(), &b, json::input_format_t::json, true, false);
  } catch (const json::exception& e) {
    fail("{}: not valid JSON ({})", what, cut(e.what()));
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

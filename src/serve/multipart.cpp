// multipart/form-data parsing and its translation to the JSON request (serve/multipart.h).
#include "serve/multipart.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <map>

#include "core/json_limits.h"
#include "serve/supervisor.h"

namespace h3::serve {

namespace {

ApiError bad(const std::string& message) {
  return {400, "invalid_request", "multipart/form-data body: " + message};
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

// `type; a=b; c="d;e"` -> {"a": "b", "c": "d;e"} (names lower case; quoted values unescaped).
std::vector<std::pair<std::string, std::string>> header_params(std::string_view v) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t i = v.find(';');
  while (i != std::string_view::npos && i < v.size()) {
    ++i;
    const size_t eq = v.find('=', i);
    if (eq == std::string_view::npos) break;
    const std::string name = lower(trim(v.substr(i, eq - i)));
    size_t j = eq + 1;
    while (j < v.size() && (v[j] == ' ' || v[j] == '\t')) ++j;
    std::string value;
    if (j < v.size() && v[j] == '"') {
      for (++j; j < v.size() && v[j] != '"'; ++j) {
        if (v[j] == '\\' && j + 1 < v.size()) ++j;
        value.push_back(v[j]);
      }
      i = v.find(';', j);
    } else {
      const size_t end = v.find(';', j);
      value = trim(v.substr(j, end == std::string_view::npos ? std::string_view::npos : end - j));
      i = end;
    }
    out.emplace_back(name, value);
  }
  return out;
}

std::string base64(std::string_view in) {
  static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < in.size(); i += 3) {
    const uint32_t v =
        static_cast<uint8_t>(in[i]) << 16 | static_cast<uint8_t>(in[i + 1]) << 8 | static_cast<uint8_t>(in[i + 2]);
    for (int k = 3; k >= 0; --k) out.push_back(a[(v >> (6 * k)) & 63]);
  }
  if (i < in.size()) {
    uint32_t v = static_cast<uint8_t>(in[i]) << 16;
    if (i + 1 < in.size()) v |= static_cast<uint8_t>(in[i + 1]) << 8;
    out.push_back(a[(v >> 18) & 63]);
    out.push_back(a[(v >> 12) & 63]);
    out.push_back(i + 1 < in.size() ? a[(v >> 6) & 63] : '=');
    out.push_back('=');
  }
  return out;
}

// "references[][kind]" -> {"references", "", "kind"}.
std::vector<std::string> name_path(const std::string& name) {
  std::vector<std::string> segs;
  const size_t open = name.find('[');
  segs.push_back(name.substr(0, open));
  if (segs[0].empty())
    throw bad(fmt::format("a part is named '{}': names start with a field name", name.substr(0, 100)));
  for (size_t i = open; i != std::string::npos && i < name.size();) {
    const size_t close = name.find(']', i);
    if (name[i] != '[' || close == std::string::npos)
      throw bad(fmt::format("part name '{}' is not FIELD, FIELD[KEY] or FIELD[] (brackets)", name.substr(0, 100)));
    segs.push_back(name.substr(i + 1, close - i - 1));
    i = close + 1;
  }
  if (segs.size() > 4) throw bad(fmt::format("part name '{}' nests deeper than 3 brackets", name.substr(0, 100)));
  return segs;
}

// Places `value` at `segs[at..]` below `node` (see multipart.h for the array rule); returns where it went,
// relative to `node`.
nlohmann::json::json_pointer place(nlohmann::json& node, const std::vector<std::string>& segs, size_t at,
                                   nlohmann::json value, const std::string& name) {
  using ptr = nlohmann::json::json_pointer;
  const std::string& seg = segs[at];
  const bool last = at + 1 == segs.size();
  if (seg.empty()) {
    if (node.is_null()) node = nlohmann::json::array();
    if (!node.is_array()) throw bad(fmt::format("part '{}' mixes a list and an object", name.substr(0, 100)));
    if (node.size() >= kMaxParts) throw bad("too many list elements");
    if (last) {
      node.push_back(std::move(value));
      return ptr() / (node.size() - 1);
    }
    // A member of the last element, or of a new one when the last already has it.
    const std::string& member = segs[at + 1];
    if (node.empty() || !node.back().is_object() || member.empty() || node.back().contains(member))
      node.push_back(nlohmann::json());
    return ptr() / (node.size() - 1) / place(node.back(), segs, at + 1, std::move(value), name);
  }
  if (node.is_null()) node = nlohmann::json::object();
  if (!node.is_object()) throw bad(fmt::format("part '{}' mixes a list and an object", name.substr(0, 100)));
  if (last) {
    if (node.contains(seg)) throw bad(fmt::format("field '{}' is given twice", name.substr(0, 100)));
    node[seg] = std::move(value);
    return ptr() / seg;
  }
  return ptr() / seg / place(node[seg], segs, at + 1, std::move(value), name);
}

// The element of `FIELD[]` that each `FIELD[][MEMBER]` part belongs to (-1 for parts of another shape). The
// JavaScript SDK writes the elements one after the other (name, strength, name, strength); the Python SDK's
// httpx groups a form's parts by name (name, name, strength, strength). When every member appears equally often
// both orders give the k-th MEMBER part to element k. When the counts differ (elements with different members)
// only the first order can be read, an element starting where its member repeats; a member twice in a row then
// cannot be told apart from the grouped order and is refused.
std::vector<int> element_indices(const std::vector<std::vector<std::string>>& paths,
                                 const std::vector<FormPart>& parts) {
  std::vector<int> index(paths.size(), -1);
  std::map<std::string, std::vector<size_t>> by_field;  // parts of each FIELD[][MEMBER] array, in order
  for (size_t i = 0; i < paths.size(); ++i)
    if (paths[i].size() >= 3 && paths[i][1].empty() && !paths[i][2].empty()) by_field[paths[i][0]].push_back(i);
  for (const auto& [field, at] : by_field) {
    std::map<std::string, int> count;
    bool repeats_in_a_row = false;
    for (size_t k = 0; k < at.size(); ++k) {
      const std::string& member = paths[at[k]][2];
      ++count[member];
      if (k > 0 && paths[at[k - 1]][2] == member && paths[at[k]].size() == 3) repeats_in_a_row = true;
    }
    const bool same_counts =
        std::all_of(count.begin(), count.end(), [&](const auto& c) { return c.second == count.begin()->second; });
    if (same_counts) {
      std::map<std::string, int> seen;
      for (size_t i : at) index[i] = seen[paths[i][2]]++;
      continue;
    }
    if (repeats_in_a_row)
      throw bad(fmt::format(
          "the elements of '{}' have different fields and their parts come grouped by name ('{}' twice in a row), "
          "so which part belongs to which element is ambiguous: give every element the same fields",
          field.substr(0, 100), parts[at[0]].name.substr(0, 100)));
    int element = -1;
    std::map<std::string, int> last;  // the element each member was last placed in
    for (size_t i : at) {
      const std::string& member = paths[i][2];
      if (element < 0 || (last.count(member) && last[member] == element)) ++element;
      last[member] = element;
      index[i] = element;
    }
  }
  return index;
}

// Numbers travel as text in a form: the engine's numeric fields are numbers again (text that is not a number is
// left as it is, for the request's own check to refuse by name).
void numbers_back(nlohmann::json& v) {
  if (!v.is_string()) return;
  const std::string& t = v.get_ref<const std::string&>();
  if (t.empty() || t.size() > 32 || t.find_first_not_of("0123456789+-.eE") != std::string::npos) return;
  try {
    nlohmann::json n = parse_json_bounded(t, "a number", 1);
    if (n.is_number()) v = n;
  } catch (const Error&) {
  }
}

}  // namespace

std::string multipart_boundary(const std::string& content_type) {
  for (const auto& [k, v] : header_params(content_type))
    if (k == "boundary" && !v.empty() && v.size() <= 200) return v;
  throw bad("the Content-Type has no boundary parameter (multipart/form-data; boundary=...)");
}

std::vector<FormPart> parse_multipart(std::string_view body, const std::string& boundary) {
  const std::string delim = "--" + boundary;
  std::vector<FormPart> parts;
  size_t pos = body.find(delim);
  if (pos == std::string_view::npos) throw bad("no part starts with the boundary the Content-Type names");
  for (;;) {
    pos += delim.size();
    if (body.substr(pos, 2) == "--") break;  // the closing delimiter
    while (pos < body.size() && (body[pos] == ' ' || body[pos] == '\t')) ++pos;
    if (body.substr(pos, 2) != "\r\n") throw bad("a boundary line does not end in CRLF");
    pos += 2;
    if (parts.size() >= kMaxParts) throw bad(fmt::format("more than {} parts", kMaxParts));
    FormPart p;
    size_t data_at;
    if (body.substr(pos, 2) == "\r\n") {
      data_at = pos + 2;  // a part without headers
    } else {
      const size_t end = body.find("\r\n\r\n", pos);
      if (end == std::string_view::npos || end - pos > kMaxPartHeader)
        throw bad(fmt::format("a part's headers do not end within {} bytes", kMaxPartHeader));
      std::string_view headers = body.substr(pos, end - pos);
      while (!headers.empty()) {
        const size_t nl = headers.find("\r\n");
        const std::string_view line = headers.substr(0, nl);
        headers = nl == std::string_view::npos ? std::string_view() : headers.substr(nl + 2);
        const size_t colon = line.find(':');
        if (colon == std::string_view::npos) throw bad("a part header has no ':'");
        const std::string key = lower(trim(line.substr(0, colon)));
        const std::string_view value = line.substr(colon + 1);
        if (key == "content-disposition") {
          if (lower(trim(value.substr(0, value.find(';')))) != "form-data")
            throw bad("a part's Content-Disposition is not form-data");
          for (const auto& [k, v] : header_params(value)) {
            if (k == "name") p.name = v;
            if (k == "filename") {
              p.filename = v;
              p.is_file = true;
            }
          }
        } else if (key == "content-type") {
          p.content_type = lower(trim(value));
        }
      }
      data_at = end + 4;
    }
    const size_t next = body.find("\r\n" + delim, data_at);
    if (next == std::string_view::npos) throw bad("a part is not closed by the boundary (truncated body?)");
    if (p.name.empty()) throw bad("a part has no name (Content-Disposition: form-data; name=...)");
    p.data = body.substr(data_at, next - data_at);
    parts.push_back(std::move(p));
    pos = next + 2;
  }
  return parts;
}

nlohmann::json form_to_request(const std::vector<FormPart>& parts) {
  nlohmann::json out = nlohmann::json::object();
  // `references[][data]` files: their element takes the file's name unless a `filename` part gives one.
  std::vector<std::pair<nlohmann::json::json_pointer, std::string>> names;
  std::vector<std::vector<std::string>> paths;
  for (const FormPart& p : parts) paths.push_back(name_path(p.name));
  const std::vector<int> element = element_indices(paths, parts);
  // Places a part's value: `FIELD[][MEMBER]` parts in the element chosen above, others by the rule of place().
  auto put = [&](size_t i, nlohmann::json value) {
    const std::vector<std::string>& segs = paths[i];
    if (element[i] < 0) return place(out, segs, 0, std::move(value), parts[i].name);
    nlohmann::json& list = out[segs[0]];
    if (list.is_null()) list = nlohmann::json::array();
    if (!list.is_array()) throw bad(fmt::format("part '{}' mixes a list and an object", parts[i].name.substr(0, 100)));
    const size_t e = static_cast<size_t>(element[i]);
    if (e >= kMaxParts) throw bad("too many list elements");
    while (list.size() <= e) list.push_back(nlohmann::json::object());
    return nlohmann::json::json_pointer() / segs[0] / e / place(list[e], segs, 2, std::move(value), parts[i].name);
  };
  for (size_t i = 0; i < parts.size(); ++i) {
    const FormPart& p = parts[i];
    const std::vector<std::string>& segs = paths[i];
    if (!p.is_file) {
      put(i, std::string(p.data));
      continue;
    }
    if (p.data.empty()) throw bad(fmt::format("file '{}' is empty", p.name.substr(0, 100)));
    const std::string filename = p.filename.empty() ? "upload" : p.filename.substr(0, 200);
    if (segs.back() == "data" && segs.size() > 1) {
      names.emplace_back(put(i, base64(p.data)).parent_pointer(), filename);
      continue;
    }
    nlohmann::json file = {{"data", base64(p.data)}, {"filename", filename}};
    if (segs.back().empty()) {  // a bare `references[]` file: its kind from its type
      const std::string& t = p.content_type;
      if (t.starts_with("image/") || t.starts_with("video/") || t.starts_with("audio/"))
        file["kind"] = t.substr(0, t.find('/'));
    }
    put(i, std::move(file));
  }
  for (const auto& [where, filename] : names)
    if (out[where].is_object() && !out[where].contains("filename")) out[where]["filename"] = filename;
  for (const char* k :
       {"width", "height", "frames", "steps", "num_inference_steps", "seed", "shift", "audio_shift", "n", "priority"})
    if (out.contains(k)) numbers_back(out[k]);
  if (out.contains("loras") && out["loras"].is_array())
    for (auto& l : out["loras"])
      if (l.is_object() && l.contains("strength")) numbers_back(l["strength"]);
  return out;
}

}  // namespace h3::serve

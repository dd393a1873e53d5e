// Server paths out of client-visible text (serve/scrub.h).
#include "serve/scrub.h"

namespace h3::serve {

namespace {

// Characters that end a path token: white space, quotes, brackets and the separators a message puts after a path.
bool ends_path(char c) {
  switch (c) {
    case ' ':
    case '\t':
    case '\n':
    case '\v':
    case '\f':
    case '\r':
    case '\'':
    case '"':
    case '(':
    case ')':
    case '[':
    case ']':
    case ',':
    case ';':
    case ':':
      return true;
    default:
      return false;
  }
}

// Characters after which a '/' starts a path ("path=/x", "'/x'", "(/x", "[/x", " /x").
bool opens_path(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\v' || c == '\f' || c == '\r' || c == '\'' || c == '"' ||
         c == '(' || c == '=' || c == '[';
}

// Every occurrence of `from` in `text` replaced by `to`, in one pass.
std::string replace_all(std::string_view text, std::string_view from, std::string_view to) {
  std::string out;
  out.reserve(text.size());
  size_t at = 0;
  for (size_t hit = text.find(from); hit != std::string_view::npos; hit = text.find(from, at)) {
    out.append(text.substr(at, hit - at));
    out.append(to);
    at = hit + from.size();
  }
  out.append(text.substr(at));
  return out;
}

// A path token is a '/' at the start or after opens_path(), and the characters up to the next ends_path(); when it
// has a second '/' at least one character after the first, it is shown as ".../" and its part after the last '/'.
std::string shorten_other_paths(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  size_t i = 0;
  while (i < s.size()) {
    if (s[i] == '/' && (i == 0 || opens_path(s[i - 1]))) {
      size_t end = i;
      while (end < s.size() && !ends_path(s[end])) ++end;
      const size_t last = s.substr(0, end).rfind('/');
      if (last != std::string_view::npos && last >= i + 2) {
        out += ".../";
        out.append(s.substr(last + 1, end - last - 1));
        i = end;
        continue;
      }
    }
    out += s[i++];
  }
  return out;
}

}  // namespace

std::string scrub_paths(std::string_view text, const std::vector<std::pair<std::string, std::string>>& known) {
  std::string s(text);
  for (const auto& [from, to] : known)
    if (from.size() >= 2 && s.find(from) != std::string::npos) s = replace_all(s, from, to);
  return shorten_other_paths(s);
}

}  // namespace h3::serve

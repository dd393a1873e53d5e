// The HTTP front's request rules (serve/http_policy.h).
#include "serve/http_policy.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cctype>
#include <limits>

namespace h3::serve {

namespace {

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

// Decimal digits to a number, saturating at 2^64 - 1 instead of wrapping.
uint64_t saturating_number(std::string_view s) {
  uint64_t v = 0;
  constexpr uint64_t max = std::numeric_limits<uint64_t>::max();
  for (char c : s) {
    const uint64_t d = static_cast<uint64_t>(c - '0');
    if (v > (max - d) / 10) return max;
    v = v * 10 + d;
  }
  return v;
}

}  // namespace

bool host_allowed(std::string_view host_header, const std::vector<std::string>& allowed) {
  const std::string_view h = trim(host_header);
  if (h.empty()) return true;  // HTTP/1.0 without Host: not a browser
  std::string name;
  if (h.front() == '[') {  // [IPv6]:port
    const size_t close = h.find(']');
    if (close == std::string_view::npos) return false;
    const std::string_view rest = h.substr(close + 1);
    if (!rest.empty() && (rest.front() != ':' || !all_digits(rest.substr(1)))) return false;
    const std::string lit(h.substr(1, close - 1));
    in6_addr a6{};
    return inet_pton(AF_INET6, lit.c_str(), &a6) == 1;
  }
  const size_t colon = h.rfind(':');
  if (colon != std::string_view::npos) {
    if (!all_digits(h.substr(colon + 1))) return false;
    name = lower(h.substr(0, colon));
  } else {
    name = lower(h);
  }
  if (name.empty()) return false;
  in_addr a4{};
  if (inet_pton(AF_INET, name.c_str(), &a4) == 1) return true;
  if (name.back() == '.') name.pop_back();
  if (name == "localhost") return true;
  for (const auto& a : allowed) {
    if (a == "*") return true;
    std::string n = lower(a);
    if (!n.empty() && n.back() == '.') n.pop_back();
    if (n == name) return true;
  }
  return false;
}

bool same_origin_or_absent(std::string_view origin, std::string_view sec_fetch_site, std::string_view host) {
  const std::string site = lower(trim(sec_fetch_site));
  if (site == "cross-site" || site == "same-site") return false;
  const std::string_view o = trim(origin);
  if (o.empty()) return true;
  const size_t scheme = o.find("://");
  if (scheme == std::string_view::npos) return false;  // "null" (sandboxed frames, file: pages) and garbage
  const std::string_view authority = o.substr(scheme + 3);
  if (authority.empty() || authority.find('/') != std::string_view::npos) return false;
  return lower(authority) == lower(trim(host));
}

std::string media_type(std::string_view content_type) {
  const size_t semi = content_type.find(';');
  return lower(trim(content_type.substr(0, semi)));
}

RangeAnswer parse_range(std::string_view header, uint64_t size) {
  RangeAnswer full;
  std::string_view h = trim(header);
  if (h.size() < 6 || lower(h.substr(0, 6)) != "bytes=") return full;
  h.remove_prefix(6);
  int specs = 0, satisfiable = 0;
  RangeAnswer one;
  while (true) {
    const size_t comma = h.find(',');
    const std::string_view spec = trim(h.substr(0, comma));
    if (!spec.empty()) {
      ++specs;
      const size_t dash = spec.find('-');
      if (dash == std::string_view::npos) return full;  // not a range-spec: ignore the field
      const std::string_view a = spec.substr(0, dash), b = spec.substr(dash + 1);
      if (a.empty()) {  // suffix: the last N bytes
        if (!all_digits(b)) return full;
        const uint64_t n = saturating_number(b);
        if (n > 0 && size > 0) {
          ++satisfiable;
          one = {RangeAnswer::partial, n >= size ? 0 : size - n, size - 1};
        }
      } else {
        if (!all_digits(a) || (!b.empty() && !all_digits(b))) return full;
        const uint64_t first = saturating_number(a);
        const uint64_t last = b.empty() ? std::numeric_limits<uint64_t>::max() : saturating_number(b);
        if (last < first) return full;  // invalid: the whole field is ignored (RFC 9110 §14.1.1)
        if (first < size) {
          ++satisfiable;
          one = {RangeAnswer::partial, first, std::min(last, size - 1)};
        }
      }
    }
    if (comma == std::string_view::npos) break;
    h.remove_prefix(comma + 1);
  }
  if (specs == 0) return full;
  if (satisfiable == 0) return {RangeAnswer::unsatisfiable, 0, 0};
  if (specs == 1) return one;
  return full;
}

bool key_matches(std::string_view presented, std::string_view key) {
  if (key.empty()) return false;
  unsigned char diff = presented.size() == key.size() ? 0 : 1;
  for (size_t i = 0; i < presented.size(); ++i) diff |= static_cast<unsigned char>(presented[i] ^ key[i % key.size()]);
  return diff == 0;
}

}  // namespace h3::serve

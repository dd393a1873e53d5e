#include "core/byte_size.h"

#include <fmt/format.h>
#include <cctype>
#include <cmath>
#include <cstdlib>

#include "core/error.h"

namespace h3 {

std::optional<int64_t> parse_byte_size(const std::string& text) {
  size_t i = 0;
  while (i < text.size() && (std::isdigit(static_cast<unsigned char>(text[i])) || text[i] == '.')) ++i;
  if (i == 0 || text.size() > 64) return std::nullopt;
  const std::string number = text.substr(0, i);
  if (number.find('.') != number.rfind('.') || number == ".") return std::nullopt;
  const double value = std::strtod(number.c_str(), nullptr);
  std::string unit;
  for (size_t j = i; j < text.size(); ++j) unit += static_cast<char>(std::tolower(static_cast<unsigned char>(text[j])));
  double scale = 0;
  if (unit.empty() || unit == "b") {
    scale = 1;
  } else {
    static constexpr const char* kPrefixes = "kmgt";
    const size_t p = std::string_view(kPrefixes).find(unit[0]);
    if (p == std::string_view::npos) return std::nullopt;
    const std::string rest = unit.substr(1);
    const double base = rest == "b" ? 1000.0 : (rest.empty() || rest == "ib") ? 1024.0 : 0.0;
    if (base == 0) return std::nullopt;
    scale = std::pow(base, static_cast<double>(p + 1));
  }
  const double bytes = value * scale;
  if (!std::isfinite(bytes) || bytes < 0 || bytes > 4.6e18) return std::nullopt;
  return static_cast<int64_t>(std::llround(bytes));
}

int64_t parse_byte_size_or_fail(const std::string& text, const std::string& what) {
  const std::optional<int64_t> b = parse_byte_size(text);
  if (!b)
    fail(
        "{}={}: not a size; write it as bytes or with a unit, e.g. 24G or 24GiB (powers of 1024), 24GB (powers of "
        "1000), 16000M",
        what, text);
  return *b;
}

std::string format_byte_size(int64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB"};
  if (bytes < 1024) return fmt::format("{} B", bytes);
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 3) v /= 1024.0, ++u;
  return v >= 100 ? fmt::format("{:.1f} {}", v, kUnits[u]) : fmt::format("{:.2f} {}", v, kUnits[u]);
}

}  // namespace h3

// The names of an enum's values as data: one table per enum, read both ways, so that printing a value and parsing a
// command-line word cannot drift apart.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.h"

namespace h3 {

template <typename E>
struct Named {
  E value;
  std::string_view name;
};

// The name of `v` in `table`; "?" for a value the table lacks.
template <typename E, size_t N>
constexpr std::string_view name_in(const std::array<Named<E>, N>& table, E v) {
  for (const auto& row : table)
    if (row.value == v) return row.name;
  return "?";
}

// The value named `s`, or null.
template <typename E, size_t N>
constexpr const E* find_named(const std::array<Named<E>, N>& table, std::string_view s) {
  for (const auto& row : table)
    if (row.name == s) return &row.value;
  return nullptr;
}

// The value named `s`; otherwise fails "unknown <what> '<s>' (allowed: <allowed>)".
template <typename E, size_t N>
E value_in(const std::array<Named<E>, N>& table, const std::string& s, std::string_view what,
           std::string_view allowed) {
  if (const E* v = find_named(table, s)) return *v;
  fail("unknown {} '{}' (allowed: {})", what, s, allowed);
}

}  // namespace h3

// A rank group's log (serve/group_log.h).
#include "serve/group_log.h"

#include <cctype>
#include <fstream>
#include <vector>

namespace h3::serve {

namespace {

bool is_digit(char c) {
  return c >= '0' && c <= '9';
}

// The end of the run of digits at `at` (at itself when there is none).
size_t digits_end(std::string_view s, size_t at) {
  while (at < s.size() && is_digit(s[at])) ++at;
  return at;
}

// `word` at `at`, then one or more digits: the position after them, or npos.
size_t word_number(std::string_view s, size_t at, std::string_view word) {
  if (s.compare(at, word.size(), word) != 0) return std::string_view::npos;
  const size_t d = at + word.size(), e = digits_end(s, d);
  return e > d ? e : std::string_view::npos;
}

bool no_data_from_rank(std::string_view l) {
  for (size_t at = l.find("no data from rank "); at != std::string_view::npos;
       at = l.find("no data from rank ", at + 1))
    if (word_number(l, at, "no data from rank ") != std::string_view::npos) return true;
  return false;
}

// "process rank N with PID P on node HOST exited on signal"
bool mpirun_signal_report(std::string_view l) {
  for (size_t at = l.find("process rank "); at != std::string_view::npos; at = l.find("process rank ", at + 1)) {
    size_t p = word_number(l, at, "process rank ");
    if (p == std::string_view::npos) continue;
    p = word_number(l, p, " with PID ");
    if (p == std::string_view::npos || l.compare(p, 9, " on node ") != 0) continue;
    p += 9;
    const size_t host = p;
    while (p < l.size() && !std::isspace(static_cast<unsigned char>(l[p]))) ++p;
    if (p > host && l.compare(p, 17, " exited on signal") == 0) return true;
  }
  return false;
}

// "rank N (HOST): ..." with no ')' inside the parentheses.
bool rank_with_host(std::string_view l) {
  size_t close = 0;  // the first ')' at or after the last position looked from (found once per region: linear)
  for (size_t at = l.find("rank "); at != std::string_view::npos; at = l.find("rank ", at + 1)) {
    const size_t p = word_number(l, at, "rank ");
    if (p == std::string_view::npos || l.compare(p, 2, " (") != 0) continue;
    if (close != std::string_view::npos && close < p + 2) close = l.find(')', p + 2);
    if (close == std::string_view::npos) return false;
    if (l.compare(close, 3, "): ") == 0) return true;
  }
  return false;
}

// "rank N " (any case) and later in the line exited / killed / signal / abort (any case). The first "rank N " has
// the longest rest of the line, so it is the only one to look behind.
bool rank_report(std::string_view line) {
  std::string l(line);
  for (char& c : l) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (size_t at = l.find("rank "); at != std::string::npos; at = l.find("rank ", at + 1)) {
    const size_t p = word_number(l, at, "rank ");
    if (p == std::string::npos || p >= l.size() || l[p] != ' ') continue;
    for (const char* w : {"exited", "killed", "signal", "abort"})
      if (l.find(w, p + 1) != std::string::npos) return true;
    return false;
  }
  return false;
}

}  // namespace

std::string file_tail(const std::string& path, size_t bytes) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return "";
  f.seekg(0, std::ios::end);
  const auto size = static_cast<size_t>(f.tellg());
  const size_t from = size > bytes ? size - bytes : 0;
  f.seekg(static_cast<std::streamoff>(from));
  std::string s(size - from, '\0');
  f.read(s.data(), static_cast<std::streamsize>(s.size()));
  return s;
}

std::string culprit_line(std::string_view log) {
  std::vector<std::string_view> lines;
  for (size_t start = 0; start < log.size();) {
    size_t nl = log.find('\n', start);
    if (nl == std::string_view::npos) nl = log.size();
    lines.push_back(log.substr(start, nl - start));
    start = nl + 1;
  }
  for (bool (*says)(std::string_view) : {no_data_from_rank, mpirun_signal_report, rank_with_host, rank_report})
    for (std::string_view l : lines)
      if (says(l)) {
        std::string t(l);
        // Drop the log prefix ("12:00:00.000 error [rank 1/2] ") and mpirun's decoration.
        auto p = t.find("rank ");
        if (p != std::string::npos && p > 0 && t.find("[rank") == std::string::npos) t = t.substr(p);
        while (!t.empty() && (t.back() == '\r' || t.back() == ' ')) t.pop_back();
        return t.size() > 600 ? t.substr(0, 600) : t;
      }
  return "";
}

}  // namespace h3::serve

// Reading a rank group's log (STORE/logs/group-N.log) for the reason it failed: the line that names the rank and
// what happened to it. Linear in the log: lines are as long as what the ranks printed (an error message may echo a
// client's field), so no regular expression.
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

namespace h3::serve {

// The last `bytes` of a file ("" when it cannot be read).
std::string file_tail(const std::string& path, size_t bytes);

// The most specific line of `log` saying which rank failed and why, without the logger's prefix (at most 600
// characters), or "" when no line does. In order of preference, the first line that holds:
//   "no data from rank N"                                            (a collective timed out waiting for N)
//   "process rank N with PID P on node H exited on signal"           (mpirun's report of a killed rank)
//   "rank N (HOST): MESSAGE"                                         (a rank's own error)
//   "rank N " followed by exited / killed / signal / abort, any case (other reports)
std::string culprit_line(std::string_view log);

}  // namespace h3::serve

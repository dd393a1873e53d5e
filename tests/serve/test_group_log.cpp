// A rank group's log read for the line that names the failed rank (serve/group_log.h): the preference order, the
// logger prefix dropped, and linear in lines as long as what the ranks printed.
#include <gtest/gtest.h>

#include <string>

#include "serve/group_log.h"
#include "support/linear_time.h"

using h3::serve::culprit_line;

TEST(ServeGroupLog, TheMostSpecificLineWins) {
  const std::string log =
      "12:00:00.000 info [rank 0/2] loading\n"
      "rank 1 (hostb): out of memory in the DiT\n"
      "process rank 1 with PID 4242 on node hostb exited on signal 9 (Killed).\n"
      "12:00:01.000 error [rank 0/2] no data from rank 1 for 20 s\n";
  EXPECT_EQ(culprit_line(log), "12:00:01.000 error [rank 0/2] no data from rank 1 for 20 s");
  EXPECT_EQ(culprit_line("x\nprocess rank 1 with PID 4242 on node hostb exited on signal 9 (Killed).\n"),
            "rank 1 with PID 4242 on node hostb exited on signal 9 (Killed).");
  EXPECT_EQ(culprit_line("mpirun: rank 3 (gpu7): CUDA error\n"), "rank 3 (gpu7): CUDA error");
  EXPECT_EQ(culprit_line("note: Rank 2 was KILLED by the OOM killer\r\n"), "note: Rank 2 was KILLED by the OOM killer");
  EXPECT_EQ(culprit_line("rank x (a): no number\nrank 1 (a) no colon\nall well\n"), "");
  EXPECT_EQ(culprit_line(""), "");
}

TEST(ServeGroupLog, LongLinesAreLinear) {
  // A rank's error echoing a client field of a megabyte: found, cut to 600 characters, no recursion.
  const std::string line = "rank 1 (h): bad aspect \"" + std::string(1000000, '(') + "\"\n";
  EXPECT_EQ(culprit_line(line).size(), 600u);
  h3::test::expect_linear(
      [](size_t n) {
        std::string l;
        for (size_t i = 0; i < n; ++i) l += "rank 1 (";
        culprit_line(l + "\n");
      },
      20000, "'rank N (' repeated");
  h3::test::expect_linear([](size_t n) { culprit_line(std::string(n, 'x') + " rank 1 exited\n"); }, 200000,
                          "one long line");
}

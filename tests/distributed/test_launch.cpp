// The multi-host pieces that need no MPI job: which lines of mpirun's stderr start the bounded teardown, the exit
// status after it, the environment forwarded to other hosts, and the placement printout.
#include <gtest/gtest.h>

#include "distributed/launch.h"
#include "distributed/placement.h"
#include "support/cli_run.h"

using h3::test::run_h3;

TEST(Launch, FailureLinesStartTheTeardown) {
  EXPECT_TRUE(h3::is_job_failure_line(
      "error: rank 0 (simhost0): 'x' did not complete within 10 s (timeout 10 s): no data from rank 2 (simhost1)"));
  EXPECT_TRUE(h3::is_job_failure_line("ORTE has lost communication with a remote daemon."));
  EXPECT_TRUE(h3::is_job_failure_line("MPI_ABORT was invoked on rank 1 in communicator MPI_COMM_WORLD"));
  EXPECT_FALSE(h3::is_job_failure_line("progress: denoise 3/40 7.5% eta 0:31"));
  EXPECT_FALSE(h3::is_job_failure_line("12:00:00.000 warning [rank 0/4] the word error: inside a line"));
  EXPECT_EQ(h3::teardown_status("error: rank 0 (a): 'x' did not complete within 10 s (timeout 10 s): ..."), 4);
  EXPECT_EQ(h3::teardown_status("ORTE has lost communication with a remote daemon."), 3);
}

TEST(Launch, ForwardsOurSettingsToOtherHosts) {
  const auto args = h3::mpirun_forward_args(
      {"H3_THREADS=2", "NCCL_SOCKET_IFNAME=eth0", "HOME=/root", "OPENBLAS_NUM_THREADS=2", "PATH=/usr/bin"});
  const std::vector<std::string> want = {"-x", "H3_THREADS", "-x", "NCCL_SOCKET_IFNAME", "-x", "OPENBLAS_NUM_THREADS"};
  EXPECT_EQ(args, want);
}

TEST(Launch, PlacementLinesGroupRanksByHost) {
  const std::vector<h3::RankPlace> places = {
      {0, "node1", 0, "cpu"}, {1, "node1", 1, "cpu"}, {2, "node2", 0, "GPU 0000:1B:00.0"}};
  const auto lines = h3::placement_lines(places);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0], "placement: 3 ranks on 2 hosts");
  EXPECT_EQ(lines[1], "  host node1: rank 0 (local 0, cpu), rank 1 (local 1, cpu)");
  EXPECT_EQ(lines[2], "  host node2: rank 2 (local 0, GPU 0000:1B:00.0)");
}

TEST(Launch, InfoReportsMemoryPerHost) {
  const auto r = run_h3("info procedural:mini --ranks 4 --mode ulysses --ranks-per-host 2");
  ASSERT_EQ(r.status, 0) << r.out;
  EXPECT_NE(r.out.find("per-host memory, 2 host(s) x 2 rank(s)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("0-1"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("2-3"), std::string::npos) << r.out;
}

// Collective tests in the style of nccl-tests: each collective on known values, ragged per-rank sizes, in place
// and out of place, counting wrong elements. Also the startup probe (a known-value all-reduce and all-to-all).
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "distributed/comm.h"

namespace h3 {

struct CommCheckRow {
  std::string collective;
  bool in_place = false;
  int64_t elements = 0;  // on this rank's receive side
  int64_t wrong = 0;     // summed over ranks
  double seconds = 0;    // rank 0's time
};

// Runs every collective at several ragged sizes; every rank gets the same rows (wrong counts summed).
std::vector<CommCheckRow> run_comm_checks(Comm& comm, int64_t base_elements);

// Startup probe: throws naming the rank, host and the likely cause when the known values do not come back.
void comm_probe(Comm& comm, const std::string& transport);

}  // namespace h3

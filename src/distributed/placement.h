// Where the ranks run: each rank's host, its local rank on that host (the GPU it takes) and its device, gathered
// once at start-up and printed by rank 0 per host, so a multi-host job shows what it placed where.
#pragma once
#include <string>
#include <vector>

#include "distributed/comm.h"

namespace h3 {

// The index of this rank among the world's ranks on its host (by host name, in world-rank order): the local rank
// OpenMPI and Slurm number the same way, computed here so that every launcher gets it.
int local_rank(Comm& world);

struct RankPlace {
  int rank = 0;
  std::string host;
  int local_rank = 0;
  std::string device;  // "cpu", or the GPU ("cuda:0 0000:1b:00.0")
};

// Collective over `comm`: every rank's place (each rank passes its own device description).
std::vector<RankPlace> gather_placement(Comm& comm, const std::string& my_device);

// "placement: N ranks on H hosts" and one line per host ("  host NAME: rank 0 (local 0, cpu), ..."), hosts in order
// of their first rank.
std::vector<std::string> placement_lines(const std::vector<RankPlace>& places);

// "name (ranks a-b)" / "name (rank a)" per host for a set of world ranks, e.g. for the encoder and denoise groups.
std::string hosts_of_ranks(const std::vector<int>& world_ranks);

}  // namespace h3

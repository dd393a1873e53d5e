// `h3 <command> --ranks N`: when the process is not already inside an MPI job, it replaces itself with
// `mpirun -np N <itself> <same arguments>` (root allowed, oversubscription allowed, no core binding); inside a job
// (mpirun, srun) it takes the world from MPI.
#pragma once
#include <string>
#include <vector>

namespace h3 {

// Returns only if no relaunch is needed; otherwise execs the launcher `mpirun` (the mpirun knob; throws h3::Error
// if it cannot).
void relaunch_under_mpi_if_needed(int ranks, int argc, char** argv, const std::string& mpirun);

}  // namespace h3

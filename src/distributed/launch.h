// `h3 <command> --ranks N`: when the process is not already inside an MPI job, it starts
// `mpirun -np N <itself> <same arguments>` (root allowed, oversubscription allowed, no core binding) in a process
// group of its own and stays as its parent; inside a job (mpirun, srun) it takes the world from MPI.
//
// Several hosts: mpirun reads its hostfile and remote agent from OpenMPI's own environment
// (OMPI_MCA_orte_default_hostfile, OMPI_MCA_plm_rsh_agent; docs/multi-host.md), so the same command spans hosts.
//
// Bounded teardown: mpirun cannot always finish an abort (a host whose link is cut leaves it waiting for that
// host's daemon). The parent forwards mpirun's stderr; once a rank reports an error ("error: ...") or mpirun
// reports a lost daemon, mpirun gets kTeardownGraceS to exit by itself, after which its process group is
// killed and the parent returns non-zero.
#pragma once
#include <string>
#include <vector>

namespace h3 {

// Seconds mpirun may take to end the job after a rank reported an error, before its process group is killed.
constexpr double kTeardownGraceS = 10.0;

// Returns only if no relaunch is needed (one rank, or already inside an MPI job); otherwise runs the launcher
// `mpirun` (the mpirun knob) as a child and exits the process with the job's status (or throws h3::Error if it
// cannot be started).
void relaunch_under_mpi_if_needed(int ranks, int argc, char** argv, const std::string& mpirun);

// `-x NAME` for every setting of `env` ("NAME=value" entries, the environment mpirun will get) that the ranks on
// other hosts need (H3_*, NCCL_*, thread counts, LD_LIBRARY_PATH): mpirun passes no environment to other hosts
// unless told.
std::vector<std::string> mpirun_forward_args(const std::vector<std::string>& env);

// True for a line of the job's stderr after which the job is failing: a rank's "error: ..." report, or the
// launcher's report of a lost daemon or an aborted job.
bool is_job_failure_line(const std::string& line);

// The parent's exit status after it had to kill mpirun: the rank's code when the line names a timeout (4),
// else 3 (a rank aborted).
int teardown_status(const std::string& first_failure_line);

}  // namespace h3

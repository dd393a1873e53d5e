#include "dist/launch.h"

#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "dist/comm.h"

namespace h3 {

void relaunch_under_mpi_if_needed(int ranks, int argc, char** argv, const std::string& mpirun) {
  if (ranks <= 1 || in_mpi_job()) return;
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const char* launcher = mpirun.c_str();
  std::vector<std::string> args = {
      launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none", "-np", std::to_string(ranks), self};
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  // Share the cores between the ranks unless the user chose.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string per_rank = std::to_string(std::max(1u, cores / static_cast<unsigned>(ranks)));
  setenv("H3_THREADS", per_rank.c_str(), 0);
  setenv("OPENBLAS_NUM_THREADS", per_rank.c_str(), 0);
  // mpirun refuses root without these (containers and CI run as root).
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  execvp(launcher, cargs.data());
  fail("--ranks {}: cannot start '{}': {} (install OpenMPI's mpirun, or start h3 under mpirun/srun yourself)", ranks,
       launcher, std::strerror(errno));
}

}  // namespace h3

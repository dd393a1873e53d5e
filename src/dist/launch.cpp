#include "dist/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <thread>

#include "core/error.h"
#include "dist/comm.h"

extern char** environ;

namespace h3 {

namespace {

volatile sig_atomic_t g_child_group = 0;

// Ctrl-C and a stop request reach mpirun's group (it is not in the terminal's foreground group).
void forward_signal(int sig) {
  if (g_child_group > 0) ::kill(-g_child_group, sig);
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void write_all(int fd, const char* p, size_t n) {
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    p += w;
    n -= static_cast<size_t>(w);
  }
}

int status_of(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 1;
}

// Runs mpirun (argv) in its own process group with stderr through a pipe; returns the parent's exit status.
[[noreturn]] void run_launcher(const std::vector<std::string>& args, int ranks) {
  int err_pipe[2], exec_pipe[2];  // mpirun's stderr; the exec's errno (closed unwritten when exec succeeds)
  if (::pipe2(err_pipe, O_CLOEXEC) != 0 || ::pipe2(exec_pipe, O_CLOEXEC) != 0)
    fail("--ranks: pipe(): {}", std::strerror(errno));
  std::vector<char*> cargs;
  std::vector<std::string> copy = args;
  for (auto& a : copy) cargs.push_back(a.data());
  cargs.push_back(nullptr);
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) fail("--ranks: fork(): {}", std::strerror(errno));
  if (pid == 0) {
    // Async-signal-safe calls only until exec. mpirun dies with this process (PDEATHSIG).
    ::setpgid(0, 0);
    ::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(127);
    ::dup2(err_pipe[1], 2);
    ::execvp(cargs[0], cargs.data());
    const int e = errno;
    write_all(exec_pipe[1], reinterpret_cast<const char*>(&e), sizeof(e));
    ::_exit(127);
  }
  ::close(exec_pipe[1]);
  int exec_errno = 0;
  ssize_t got;
  while ((got = ::read(exec_pipe[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  ::close(exec_pipe[0]);
  if (got == static_cast<ssize_t>(sizeof(exec_errno))) {
    ::waitpid(pid, nullptr, 0);
    fail("--ranks {}: cannot start '{}': {} (install OpenMPI's mpirun, or start h3 under mpirun/srun yourself)", ranks,
         args[0], std::strerror(exec_errno));
  }
  ::setpgid(pid, pid);  // also here, so the group exists before any signal is forwarded
  g_child_group = pid;
  ::close(err_pipe[1]);
  struct sigaction sa {};
  sa.sa_handler = forward_signal;
  ::sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  ::fcntl(err_pipe[0], F_SETFL, O_NONBLOCK);

  std::string pending, first_failure;
  double deadline = 0;  // 0: no failure seen yet
  int wait_status = 0;
  bool exited = false;
  auto pump = [&] {
    char buf[4096];
    for (;;) {
      const ssize_t n = ::read(err_pipe[0], buf, sizeof(buf));
      if (n <= 0) return;
      write_all(2, buf, static_cast<size_t>(n));
      pending.append(buf, static_cast<size_t>(n));
      size_t nl;
      while ((nl = pending.find('\n')) != std::string::npos) {
        const std::string line = pending.substr(0, nl);
        pending.erase(0, nl + 1);
        if (deadline == 0 && is_job_failure_line(line)) {
          first_failure = line;
          deadline = now_s() + kTeardownGraceS;
        }
      }
    }
  };
  while (!exited) {
    pollfd p{err_pipe[0], POLLIN, 0};
    ::poll(&p, 1, 200);
    pump();
    const pid_t w = ::waitpid(pid, &wait_status, WNOHANG);
    if (w == pid) exited = true;
    if (!exited && deadline > 0 && now_s() > deadline) {
      std::fprintf(stderr,
                   "error: --ranks: mpirun did not end the failed job within %.0f s; stopping its processes here "
                   "(processes on hosts that cannot be reached stay until they time out or their host returns)\n",
                   kTeardownGraceS);
      ::kill(-pid, SIGTERM);
      const double until = now_s() + 2;
      while (now_s() < until && ::waitpid(pid, &wait_status, WNOHANG) != pid)
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &wait_status, 0);
      pump();
      std::fflush(stderr);
      std::_Exit(teardown_status(first_failure));
    }
  }
  pump();  // what is already in the pipe (daemons of other hosts may hold its write end open: no wait for EOF)
  std::fflush(stderr);
  std::_Exit(status_of(wait_status));
}

}  // namespace

bool is_job_failure_line(const std::string& line) {
  // "error: rank 2 (host-b): ..." from abort_job; mpirun's own reports of a lost daemon or an aborted job.
  if (line.rfind("error: ", 0) == 0) return true;
  static const char* const needles[] = {"ORTE has lost communication with", "MPI_ABORT was invoked",
                                        "ORTE was unable to reliably start", "An ORTE daemon has unexpectedly failed"};
  for (const char* n : needles)
    if (line.find(n) != std::string::npos) return true;
  return false;
}

int teardown_status(const std::string& first_failure_line) {
  return first_failure_line.find("did not complete within") != std::string::npos ? 4 : 3;
}

std::vector<std::string> mpirun_forward_args(const std::vector<std::string>& env) {
  std::vector<std::string> out;
  for (const std::string& kv : env) {
    const std::string name = kv.substr(0, kv.find('='));
    const bool ours = name.rfind("H3_", 0) == 0 || name.rfind("NCCL_", 0) == 0;
    const bool threads = name == "OPENBLAS_NUM_THREADS" || name == "OMP_NUM_THREADS" || name == "LD_LIBRARY_PATH";
    if (ours || threads) {
      out.emplace_back("-x");
      out.push_back(name);
    }
  }
  return out;
}

void relaunch_under_mpi_if_needed(int ranks, int argc, char** argv) {
  if (ranks <= 1 || in_mpi_job()) return;
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const char* launcher = std::getenv("H3_MPIRUN") ? std::getenv("H3_MPIRUN") : "mpirun";
  // Share the cores between the ranks unless the user chose.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string per_rank = std::to_string(std::max(1u, cores / static_cast<unsigned>(ranks)));
  setenv("H3_THREADS", per_rank.c_str(), 0);
  setenv("OPENBLAS_NUM_THREADS", per_rank.c_str(), 0);
  // mpirun refuses root without these (containers and CI run as root).
  setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
  setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
  std::vector<std::string> args = {launcher, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                                   "-np",    std::to_string(ranks)};
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (auto& a : mpirun_forward_args(env)) args.push_back(std::move(a));
  args.push_back(self);
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  run_launcher(args, ranks);
}

}  // namespace h3

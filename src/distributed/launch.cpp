#include "distributed/launch.h"

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
#include <map>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "core/log.h"
#include "distributed/comm.h"

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

// mpirun's stderr on its way to ours: shown as it comes, except rank 0's placement report (kept, not shown); a
// failure line starts the teardown clock; a lost host's daemon is translated into the ranks it ran.
class LauncherOutput {
 public:
  void feed(const char* p, size_t n) {
    pending_.append(p, n);
    size_t nl;
    while ((nl = pending_.find('\n')) != std::string::npos) {
      line(pending_.substr(0, nl + 1), shown_);
      pending_.erase(0, nl + 1);
      shown_ = 0;
    }
    // A partial line (a progress bar) is shown now unless it may still become a placement report.
    const size_t k = std::min(pending_.size(), kPlacementTag.size());
    if (pending_.size() > shown_ && pending_.compare(0, k, kPlacementTag, 0, k) != 0) {
      write_all(2, pending_.data() + shown_, pending_.size() - shown_);
      shown_ = pending_.size();
    }
  }
  double deadline() const { return deadline_; }
  const std::string& first_failure() const { return first_failure_; }

 private:
  // `with_nl`: one line and its newline, of which the first `shown` bytes were written already.
  void line(const std::string& with_nl, size_t shown) {
    const std::string l = with_nl.substr(0, with_nl.size() - 1);
    if (l.rfind(kPlacementTag, 0) == 0) {  // "h3-placement: RANK HOST"
      std::istringstream in(l.substr(kPlacementTag.size()));
      int rank = -1;
      std::string host;
      if (in >> rank >> host) ranks_of_[host].push_back(rank);
      return;
    }
    write_all(2, with_nl.data() + shown, with_nl.size() - shown);
    if (deadline_ == 0 && is_job_failure_line(l)) {
      first_failure_ = l;
      deadline_ = now_s() + kTeardownGraceS;
    }
    // mpirun: "  Remote daemon: [[24423,0],1] on node simhost1" after "ORTE has lost communication ..."
    const auto at = l.find("Remote daemon");
    const auto on = l.find(" on node ");
    if (at != std::string::npos && on != std::string::npos) {
      std::string host = l.substr(on + 9);
      while (!host.empty() && (host.back() == ' ' || host.back() == '\r')) host.pop_back();
      std::string ranks;
      for (int r : ranks_of_[host]) ranks += fmt::format("{}rank {} ({})", ranks.empty() ? "" : ", ", r, host);
      const std::string msg = fmt::format(
          "error: lost host {}{}{} -- its daemon stopped answering (host down, network cut, or its "
          "processes killed); the job ends\n",
          host, ranks.empty() ? "" : ": ", ranks);
      write_all(2, msg.data(), msg.size());
      if (deadline_ == 0) {
        first_failure_ = msg;
        deadline_ = now_s() + kTeardownGraceS;
      }
    }
  }
  static inline const std::string kPlacementTag = "h3-placement: ";
  std::string pending_, first_failure_;
  size_t shown_ = 0;  // bytes of pending_ already written
  double deadline_ = 0;
  std::map<std::string, std::vector<int>> ranks_of_;
};

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

  LauncherOutput out;
  int wait_status = 0;
  bool exited = false;
  auto pump = [&] {
    char buf[4096];
    ssize_t n;
    while ((n = ::read(err_pipe[0], buf, sizeof(buf))) > 0) out.feed(buf, static_cast<size_t>(n));
  };
  while (!exited) {
    pollfd p{err_pipe[0], POLLIN, 0};
    ::poll(&p, 1, 200);
    pump();
    const pid_t w = ::waitpid(pid, &wait_status, WNOHANG);
    if (w == pid) exited = true;
    if (!exited && out.deadline() > 0 && now_s() > out.deadline()) {
      std::fprintf(stderr,
                   "error: --ranks: mpirun did not end the failed job within %.0f s; stopping its processes here "
                   "(processes on hosts that cannot be reached stay until they time out or their host returns)\n",
                   kTeardownGraceS);
      // SIGKILL: mpirun had its chance to end the job cleanly; a SIGTERM now sends it into PMIx_Finalize, which
      // waits on (or crashes for) the daemons it cannot reach.
      ::kill(-pid, SIGKILL);
      ::waitpid(pid, &wait_status, 0);
      pump();
      std::fflush(stderr);
      std::_Exit(teardown_status(out.first_failure()));
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

void relaunch_under_mpi_if_needed(int ranks, int argc, char** argv, const std::string& mpirun) {
  if (ranks <= 1 || in_mpi_job()) return;
  std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string& launcher = mpirun;
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
  args.emplace_back("--report-placement");  // rank 0 tells this parent which host runs which ranks
  for (int i = 1; i < argc; ++i) args.emplace_back(argv[i]);
  run_launcher(args, ranks);
}

}  // namespace h3

// Media probing in a child process (serve/probe.h).
#include "serve/probe.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "core/error.h"

extern char** environ;

namespace h3::serve {

MediaInfo probe_media(const std::string& self_exe, const std::string& path, int64_t max_frames, int64_t max_samples,
                      const ProbeLimits& lim) {
  int out[2], err[2];
  if (::pipe2(out, O_CLOEXEC) != 0) fail("media probe: pipe(): {}", std::strerror(errno));
  if (::pipe2(err, O_CLOEXEC) != 0) {
    ::close(out[0]);
    ::close(out[1]);
    fail("media probe: pipe(): {}", std::strerror(errno));
  }
  std::vector<std::string> args = {self_exe,
                                   "--log-level",
                                   "error",
                                   "probe-media",
                                   path,
                                   "--max-frames",
                                   std::to_string(max_frames),
                                   "--max-samples",
                                   std::to_string(max_samples)};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  // One thread and no MPI: the child only decodes.
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) {
    const std::string kv = *e;
    if (kv.rfind("H3_THREADS=", 0) == 0 || kv.rfind("OMP_NUM_THREADS=", 0) == 0 ||
        kv.rfind("OPENBLAS_NUM_THREADS=", 0) == 0 || kv.rfind("H3_API_KEY", 0) == 0)
      continue;
    env.push_back(kv);
  }
  env.insert(env.end(), {"H3_THREADS=1", "OMP_NUM_THREADS=1", "OPENBLAS_NUM_THREADS=1"});
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  const pid_t pid = ::fork();
  if (pid == 0) {
    // Async-signal-safe calls only until exec.
    rlimit mem{lim.memory_bytes, lim.memory_bytes}, cpu{static_cast<rlim_t>(lim.cpu_s), static_cast<rlim_t>(lim.cpu_s)},
        core{0, 0};
    ::setrlimit(RLIMIT_AS, &mem);
    ::setrlimit(RLIMIT_CPU, &cpu);
    ::setrlimit(RLIMIT_CORE, &core);
    int null_fd = ::open("/dev/null", O_RDONLY);
    if (null_fd >= 0) ::dup2(null_fd, 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::syscall(SYS_close_range, 3u, ~0u, 0u);
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(out[1]);
  ::close(err[1]);
  if (pid < 0) {
    ::close(out[0]);
    ::close(err[0]);
    fail("media probe: fork(): {}", std::strerror(errno));
  }
  std::string text[2];
  bool open[2] = {true, true};
  const int fds[2] = {out[0], err[0]};
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(lim.wall_s);
  bool timed_out = false;
  while (open[0] || open[1]) {
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) {
      timed_out = true;
      break;
    }
    pollfd p[2] = {{open[0] ? fds[0] : -1, POLLIN, 0}, {open[1] ? fds[1] : -1, POLLIN, 0}};
    if (::poll(p, 2, static_cast<int>(std::min<int64_t>(left.count(), 1000))) < 0 && errno != EINTR) break;
    for (int i = 0; i < 2; ++i) {
      if (!open[i] || !(p[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[4096];
      const ssize_t n = ::read(fds[i], buf, sizeof(buf));
      if (n <= 0) {
        open[i] = false;
      } else if (text[i].size() < (1u << 20)) {
        text[i].append(buf, static_cast<size_t>(n));
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  ::close(fds[0]);
  ::close(fds[1]);
  if (timed_out) fail("{}: reading it took longer than {:.0f} s; refused", path, lim.wall_s);
  if (WIFSIGNALED(status)) {
    const int sig = WTERMSIG(status);
    if (sig == SIGXCPU || sig == SIGKILL)
      fail("{}: reading it needs more than {} s of CPU time; refused", path, lim.cpu_s);
    fail("{}: reading it needs more than {:.1f} GB of memory or failed (signal {}); refused", path,
         static_cast<double>(lim.memory_bytes) / 1e9, sig);
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::string why = text[1];
    while (!why.empty() && (why.back() == '\n' || why.back() == '\r')) why.pop_back();
    const auto nl = why.rfind('\n');
    if (nl != std::string::npos) why = why.substr(nl + 1);
    if (why.rfind("error: ", 0) == 0) why = why.substr(7);
    if (why.find("std::bad_alloc") != std::string::npos)
      fail("{}: reading it needs more than {:.1f} GB of memory; refused", path,
           static_cast<double>(lim.memory_bytes) / 1e9);
    throw Error(why.empty() ? fmt::format("{}: the media probe failed (exit {})", path, WEXITSTATUS(status)) : why);
  }
  return media_info_from_json(text[0]);
}

}  // namespace h3::serve

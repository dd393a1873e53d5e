// The signal state of core/signals.h: a flag and a pipe, each reachable from its handler.
#include "core/signals.h"

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "core/error.h"

namespace h3 {

namespace {

std::atomic<bool> sigint_flag{false};
std::atomic<bool> sigint_owned{false};
const char* sigint_notice = "";

extern "C" void on_sigint(int) {
  if (sigint_flag.exchange(true)) {
    std::signal(SIGINT, SIG_DFL);
    std::raise(SIGINT);
    return;
  }
  [[maybe_unused]] ssize_t n = ::write(2, sigint_notice, std::strlen(sigint_notice));
}

int stop_pipe[2] = {-1, -1};
std::atomic<bool> stop_owned{false};
constexpr char kSignalled = 1, kReleased = 2;

extern "C" void on_stop_signal(int) {
  [[maybe_unused]] ssize_t n = ::write(stop_pipe[1], &kSignalled, 1);
}

}  // namespace

SigintCancels::SigintCancels(const char* notice) {
  H3_ASSERT(!sigint_owned.exchange(true), "SigintCancels: one at a time");
  sigint_notice = notice;
  sigint_flag = false;
  std::signal(SIGINT, on_sigint);
}

SigintCancels::~SigintCancels() {
  std::signal(SIGINT, SIG_DFL);
  sigint_owned = false;
}

const std::atomic<bool>* SigintCancels::flag() const {
  return &sigint_flag;
}

StopSignals::StopSignals() {
  H3_ASSERT(!stop_owned.exchange(true), "StopSignals: one at a time");
  if (::pipe(stop_pipe) != 0) {
    stop_owned = false;
    fail("stop signals: pipe(): {}", std::strerror(errno));
  }
}

StopSignals::~StopSignals() {
  std::signal(SIGINT, SIG_DFL);
  std::signal(SIGTERM, SIG_DFL);
  ::close(stop_pipe[0]);
  ::close(stop_pipe[1]);
  stop_pipe[0] = stop_pipe[1] = -1;
  stop_owned = false;
}

void StopSignals::catch_signals() {
  std::signal(SIGINT, on_stop_signal);
  std::signal(SIGTERM, on_stop_signal);
}

bool StopSignals::wait() {
  char c = 0;
  while (::read(stop_pipe[0], &c, 1) < 0 && errno == EINTR) {
  }
  return c != kReleased;  // a signal, or a failed read: stop either way
}

void StopSignals::release() {
  [[maybe_unused]] ssize_t n = ::write(stop_pipe[1], &kReleased, 1);
}

void kill_or_stall(bool kill) {
  if (kill) std::raise(SIGKILL);
  for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
}

}  // namespace h3

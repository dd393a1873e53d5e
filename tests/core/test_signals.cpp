// core/signals.h: the first SIGINT sets the cancel flag (and says so on stderr); SIGTERM and SIGINT wake a stop
// waiter, and release() wakes it as "no signal". The signals are raised in this process; a second SIGINT (which
// ends the process) is not.
#include <gtest/gtest.h>

#include <csignal>
#include <thread>

#include "core/signals.h"

namespace h3 {
namespace {

TEST(Signals, TheFirstSigintCancels) {
  {
    const SigintCancels sigint("(test: SIGINT caught)\n");
    EXPECT_FALSE(sigint.flag()->load());
    std::raise(SIGINT);
    EXPECT_TRUE(sigint.flag()->load());
  }
  const SigintCancels again("");
  EXPECT_FALSE(again.flag()->load()) << "a new guard starts uncancelled";
}

TEST(Signals, StopSignalsWakeTheWaiter) {
  for (int sig : {SIGTERM, SIGINT}) {
    StopSignals stop;
    stop.catch_signals();
    std::raise(sig);
    EXPECT_TRUE(stop.wait()) << sig;
  }
  StopSignals stop;
  stop.catch_signals();
  std::thread waiter([&] { EXPECT_FALSE(stop.wait()) << "released, no signal"; });
  stop.release();
  waiter.join();
}

}  // namespace
}  // namespace h3

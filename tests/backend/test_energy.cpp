// The energy arithmetic of backend/energy.h without a GPU: a fake counter read as h3 bench reads the board's (once
// before the timed forwards, once after), joules per forward and mean watts from its difference, and an absent figure
// (never a guess) when the counter is missing, a read fails or the counter went backwards.
#include <gtest/gtest.h>

#include <deque>

#include "backend/energy.h"
#include "core/error.h"

using namespace h3;

namespace {

// A counter that hands out scripted readings in order (nullopt: a failed read).
EnergyCounter scripted(std::deque<std::optional<uint64_t>> readings) {
  EnergyCounter c;
  c.source = "fake";
  c.read_mj = [r = std::move(readings)]() mutable {
    std::optional<uint64_t> v = r.front();
    r.pop_front();
    return v;
  };
  return c;
}

}  // namespace

TEST(Energy, JoulesPerForwardAndMeanWattsFromTheCounterDifference) {
  // 3 forwards of ~0.86 s at ~690 W: 1,780.2 J in 2.58 s, on a counter already far from zero (mJ since driver load).
  const uint64_t base = 9'876'543'210'123;
  const EnergyCounter c = scripted({base, base + 1'780'200});
  const std::optional<uint64_t> start = c.read(), end = c.read();
  const EnergySpan e = energy_span(start, end, 3, 2.58);
  ASSERT_TRUE(e.joules && e.joules_per_forward && e.mean_watts);
  EXPECT_DOUBLE_EQ(*e.joules, 1780.2);
  EXPECT_DOUBLE_EQ(*e.joules_per_forward, 593.4);
  EXPECT_NEAR(*e.mean_watts, 690.0, 1e-9);
}

TEST(Energy, AbsentCounterGivesAbsentFiguresNotZero) {
  EnergyCounter none;
  none.absent = "libnvidia-ml.so.1 not loaded";
  EXPECT_FALSE(none.read());
  const EnergySpan e = energy_span(none.read(), none.read(), 3, 2.5);
  EXPECT_FALSE(e.joules);
  EXPECT_FALSE(e.joules_per_forward);
  EXPECT_FALSE(e.mean_watts);
}

TEST(Energy, AFailedReadAtEitherEndGivesAbsentFigures) {
  const EnergyCounter c = scripted({std::nullopt, 5000, 7000, std::nullopt});
  EXPECT_FALSE(energy_span(c.read(), c.read(), 3, 2.5).joules_per_forward);
  EXPECT_FALSE(energy_span(c.read(), c.read(), 3, 2.5).joules_per_forward);
}

TEST(Energy, ACounterThatWentBackwardsGivesAbsentFigures) {
  // The driver reloaded between the readings: the counter restarted from zero.
  const EnergySpan e = energy_span(5'000'000, 1'000, 3, 2.5);
  EXPECT_FALSE(e.joules);
  EXPECT_FALSE(e.mean_watts);
  // An idle board whose counter did not advance in the span is a real zero, not absent.
  const EnergySpan idle = energy_span(5'000'000, 5'000'000, 3, 2.5);
  ASSERT_TRUE(idle.joules_per_forward);
  EXPECT_EQ(*idle.joules_per_forward, 0.0);
}

TEST(Energy, NoForwardsOrNoTimeIsAnInternalError) {
  EXPECT_THROW(energy_span(0, 1000, 0, 2.5), Error);
  EXPECT_THROW(energy_span(0, 1000, 3, 0.0), Error);
}

TEST(Energy, TheNvmlCounterOfNoSuchGpuIsAbsentAndSaysWhy) {
  // Here without a driver the library is missing; on a GPU machine no device sits at this bus id. Either way the
  // counter has no read function and names the reason.
  const EnergyCounter c = nvml_energy_counter("00ff:ff:1f.7");
  EXPECT_FALSE(c.absent.empty());
  EXPECT_FALSE(c.read_mj);
  EXPECT_FALSE(c.read());
}

// The region profiler (core/profile.h): spans per name, nesting, host time, host-only regions, and a span left
// open across take() dropped rather than written into the next round's table.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/profile.h"

using namespace h3;

namespace {

const profile::Total* find(const std::vector<profile::Total>& t, const std::string& name) {
  for (const auto& x : t)
    if (x.name == name) return &x;
  return nullptr;
}

struct Enabled {
  bool was = profile::enabled();
  Enabled() {
    profile::set_enabled(true);
    (void)profile::take();
  }
  ~Enabled() {
    (void)profile::take();
    profile::set_enabled(was);
  }
};

}  // namespace

TEST(Profile, CountsSpansHostTimeAndHostOnlyRegions) {
  Enabled on;
  {
    profile::Region outer("outer");
    for (int i = 0; i < 3; ++i) {
      profile::Region inner("inner");
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    profile::HostRegion h("host");
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  const auto t = profile::take();
  const auto *outer = find(t, "outer"), *inner = find(t, "inner"), *host = find(t, "host");
  ASSERT_TRUE(outer && inner && host);
  EXPECT_EQ(outer->spans, 1);
  EXPECT_EQ(inner->spans, 3);
  EXPECT_EQ(host->spans, 1);
  EXPECT_TRUE(host->host_only);
  EXPECT_FALSE(inner->host_only);
  EXPECT_GE(inner->host_seconds, 0.006);
  EXPECT_GE(host->host_seconds, 0.003);
  EXPECT_GE(outer->host_seconds, inner->host_seconds + host->host_seconds);
  EXPECT_GE(host->seconds, 0.003);  // host-only: its seconds are host clock
  EXPECT_TRUE(profile::take().empty()) << "take() resets";
}

TEST(Profile, SpanOpenAcrossTakeIsDropped) {
  Enabled on;
  std::vector<profile::Total> later;
  {
    profile::Region open("open");
    (void)profile::take();  // "open" has begun, not ended
    profile::Region fresh("fresh");
  }
  later = profile::take();
  ASSERT_EQ(later.size(), 1u) << "only the span begun after take(): " << later.size();
  EXPECT_EQ(later[0].name, "fresh");
  EXPECT_GE(later[0].host_seconds, 0.0);
}

TEST(Profile, DisabledRecordsNothing) {
  const bool was = profile::enabled();
  profile::set_enabled(false);
  { profile::Region r("off"); }
  EXPECT_TRUE(profile::take().empty());
  profile::set_enabled(was);
}

// The log line a phase writes under --profile-regions: every region with its spans, the host time only where the
// host spent noticeably more (or less) than the device.
TEST(Profile, LineNamesEachRegionAndTheHostTimeWhereItDiffers) {
  std::vector<profile::Total> t = {{"attention", 2.0, 50, 2.05, 0, false},
                                   {"tensor exchange", 1.0, 100, 3.5, 0, false},
                                   {"cuda.malloc", 0.25, 4, 0.25, 0, true}};
  EXPECT_EQ(profile::line(t),
            "attention 2.000 s x50, tensor exchange 1.000 s (host 3.500 s) x100, cuda.malloc 0.250 s x4");
  t[1].idle_before = 0.5, t[0].idle_before = 0.25;
  EXPECT_EQ(profile::line(t),
            "attention 2.000 s x50, tensor exchange 1.000 s (host 3.500 s) x100, cuda.malloc 0.250 s x4; the device "
            "idle before regions 0.750 s");
  EXPECT_EQ(profile::line({}), "no regions");
}

// Where the time of a real forward goes: named regions timed on the device's compute stream (device events, one
// synchronization when the totals are read) or on the host clock when no device backend runs. Off unless
// H3_PROFILE=1 or set_enabled(true); a disabled Region costs one branch.
//
//   { profile::Region r("attention"); ... }      // nested regions each count their own span
//   for (auto& [name, s] : profile::take()) ...  // seconds per name since the last take(), in first-seen order
//
// Besides its device time a region reports its host time (how long the host spent between its start and end:
// near the device time when the host waits inside it) and the device's idle time just before it began (from the
// end of the latest region that had closed by then to its start: the device ran out of queued work because the
// host had not yet issued this region). HostRegion counts host time only (allocations, synchronizations).
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace h3::profile {

bool enabled();
void set_enabled(bool on);

class Region {
 public:
  explicit Region(const char* name) : Region(name, false) {}
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 protected:
  Region(const char* name, bool host_only);

 private:
  int slot_ = -1;
  unsigned gen_ = 0;
  bool host_only_ = false;
};

// A span timed on the host clock only, also with a device backend (it records no event, so it is safe where the
// device must not be touched, e.g. inside the allocator).
class HostRegion : public Region {
 public:
  explicit HostRegion(const char* name) : Region(name, true) {}
};

// Seconds per region name accumulated since the last call, and the count of spans; resets.
struct Total {
  std::string name;
  double seconds = 0;  // device time (host time for host-only regions)
  int spans = 0;
  double host_seconds = 0;  // host clock between the region's start and end
  double idle_before = 0;   // device idle before the region's start (device regions that follow a closed one)
  bool host_only = false;
};
std::vector<Total> take();
// The totals in one line, e.g. for a log: "attention 1.234 s x50, exchange 0.120 s (host 3.400 s) x100, ...": the
// host time shown where it differs from the device time by more than a tenth (the host waited inside the region,
// or queued it far ahead), and at the end the device's idle time before regions (the host was late), when any.
std::string line(const std::vector<Total>& totals);

}  // namespace h3::profile

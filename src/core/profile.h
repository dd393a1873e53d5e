// Where the time of a real forward goes: named regions timed on the device's compute stream (device events, one
// synchronization when the totals are read) or on the host clock when no device backend runs. Off unless
// H3_PROFILE=1 or set_enabled(true); a disabled Region costs one branch.
//
//   { profile::Region r("attention"); ... }      // nested regions each count their own span
//   for (auto& [name, s] : profile::take()) ...  // seconds per name since the last take(), in first-seen order
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace h3::profile {

bool enabled();
void set_enabled(bool on);

class Region {
 public:
  explicit Region(const char* name);
  ~Region();
  Region(const Region&) = delete;
  Region& operator=(const Region&) = delete;

 private:
  int slot_ = -1;
};

// Seconds per region name accumulated since the last call, and the count of spans; resets.
struct Total {
  std::string name;
  double seconds = 0;
  int spans = 0;
};
std::vector<Total> take();

}  // namespace h3::profile

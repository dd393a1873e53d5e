#include "core/profile.h"

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/device.h"

namespace h3::profile {

namespace {

struct Mark {
  void* event = nullptr;  // device event, or null with `host` set
  std::chrono::steady_clock::time_point host;
};
struct Span {
  const char* name;
  Mark begin, end;
};

struct State {
  std::mutex mu;
  bool on = [] {
    const char* e = std::getenv("H3_PROFILE");
    return e && std::string(e) == "1";
  }();
  std::vector<Span> spans;
};
State& state() {
  static State s;
  return s;
}

Mark mark() {
  Mark m;
  if (have_device_backend() && device_hooks().event_record) m.event = device_hooks().event_record();
  else m.host = std::chrono::steady_clock::now();
  return m;
}

}  // namespace

bool enabled() { return state().on; }
void set_enabled(bool on) { state().on = on; }

Region::Region(const char* name) {
  State& s = state();
  if (!s.on) return;
  Mark m = mark();
  std::lock_guard lock(s.mu);
  slot_ = static_cast<int>(s.spans.size());
  s.spans.push_back({name, m, {}});
}

Region::~Region() {
  if (slot_ < 0) return;
  Mark m = mark();
  State& s = state();
  std::lock_guard lock(s.mu);
  if (slot_ < static_cast<int>(s.spans.size())) s.spans[slot_].end = m;
}

std::vector<Total> take() {
  State& s = state();
  std::vector<Span> spans;
  {
    std::lock_guard lock(s.mu);
    spans.swap(s.spans);
  }
  std::vector<Total> out;
  for (const Span& sp : spans) {
    double sec = 0;
    if (sp.begin.event && sp.end.event)
      sec = device_hooks().event_elapsed_ms(sp.begin.event, sp.end.event) / 1e3;
    else if (!sp.begin.event && !sp.end.event)
      sec = std::chrono::duration<double>(sp.end.host - sp.begin.host).count();
    for (void* e : {sp.begin.event, sp.end.event})
      if (e) device_hooks().event_release(e);
    Total* t = nullptr;
    for (auto& o : out)
      if (o.name == sp.name) t = &o;
    if (!t) {
      out.push_back({sp.name, 0, 0});
      t = &out.back();
    }
    t->seconds += sec;
    t->spans += 1;
  }
  return out;
}

}  // namespace h3::profile

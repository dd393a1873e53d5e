#include "core/profile.h"

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "core/device.h"
#include "core/knobs.h"

namespace h3::profile {

namespace {

using Clock = std::chrono::steady_clock;

struct Mark {
  void* event = nullptr;  // device event, or null for host-only spans and without a device backend
  Clock::time_point host;
};
struct Span {
  const char* name;
  Mark begin, end;
  bool host_only = false;
};

struct State {
  std::mutex mu;
  bool on = knobs().profile;
  std::vector<Span> spans;
  std::vector<std::pair<int, bool>> order;  // device marks as recorded: (span, is_end)
  unsigned gen = 1;                         // bumped by take(): a span open across it is dropped
};
State& state() {
  static State s;
  return s;
}

Mark mark(bool device) {
  Mark m;
  if (device && have_device_backend() && device_hooks().event_record) m.event = device_hooks().event_record();
  m.host = Clock::now();
  return m;
}

int open_span(const char* name, bool host_only, unsigned& gen) {
  State& s = state();
  if (!s.on) return -1;
  Mark m = mark(!host_only);
  std::lock_guard lock(s.mu);
  const int slot = static_cast<int>(s.spans.size());
  s.spans.push_back({name, m, {}, host_only});
  if (m.event) s.order.emplace_back(slot, false);
  gen = s.gen;
  return slot;
}

void close_span(int slot, bool host_only, unsigned gen) {
  if (slot < 0) return;
  Mark m = mark(!host_only);
  State& s = state();
  std::lock_guard lock(s.mu);
  if (gen == s.gen && slot < static_cast<int>(s.spans.size())) {
    s.spans[slot].end = m;
    if (m.event) s.order.emplace_back(slot, true);
  } else if (m.event) {
    device_hooks().event_release(m.event);  // the span was taken while open
  }
}

}  // namespace

bool enabled() {
  return state().on;
}
void set_enabled(bool on) {
  state().on = on;
}

// In the bodies: gen_'s default initializer runs after slot_'s, so it cannot be written from slot_'s initializer.
Region::Region(const char* name, bool host_only) : host_only_(host_only) {
  slot_ = open_span(name, host_only, gen_);
}
Region::~Region() {
  close_span(slot_, host_only_, gen_);
}

std::vector<Total> take() {
  State& s = state();
  std::vector<Span> spans;
  std::vector<std::pair<int, bool>> order;
  {
    std::lock_guard lock(s.mu);
    spans.swap(s.spans);
    order.swap(s.order);
    ++s.gen;
  }
  // Device time from the mark recorded just before each region's start to that start.
  std::vector<double> idle(spans.size(), 0.0);
  for (size_t i = 1; i < order.size(); ++i) {
    const auto [slot, is_end] = order[i];
    if (is_end) continue;
    const auto [pslot, pend] = order[i - 1];
    void* prev = pend ? spans[pslot].end.event : spans[pslot].begin.event;
    if (prev && spans[slot].begin.event)
      idle[slot] = device_hooks().event_elapsed_ms(prev, spans[slot].begin.event) / 1e3;
  }
  std::vector<Total> out;
  for (size_t i = 0; i < spans.size(); ++i) {
    const Span& sp = spans[i];
    const double host = sp.end.host >= sp.begin.host
                            ? std::chrono::duration<double>(sp.end.host - sp.begin.host).count()
                            : 0.0;  // still open when taken
    double sec = 0;
    if (sp.begin.event && sp.end.event)
      sec = device_hooks().event_elapsed_ms(sp.begin.event, sp.end.event) / 1e3;
    else if (!sp.begin.event)
      sec = host;
    Total* t = nullptr;
    for (auto& o : out)
      if (o.name == sp.name) t = &o;
    if (!t) {
      out.push_back({sp.name, 0, 0, 0, 0, sp.host_only});
      t = &out.back();
    }
    t->seconds += sec;
    t->spans += 1;
    t->host_seconds += host;
    t->idle_before += idle[i];
  }
  for (const Span& sp : spans)
    for (void* e : {sp.begin.event, sp.end.event})
      if (e) device_hooks().event_release(e);
  return out;
}

std::string line(const std::vector<Total>& totals) {
  std::string out;
  double idle = 0;
  for (const Total& t : totals) {
    if (!out.empty()) out += ", ";
    out += fmt::format("{} {:.3f} s", t.name, t.seconds);
    if (!t.host_only && std::abs(t.host_seconds - t.seconds) > 0.1 * t.seconds)
      out += fmt::format(" (host {:.3f} s)", t.host_seconds);
    out += fmt::format(" x{}", t.spans);
    idle += t.idle_before;
  }
  if (out.empty()) return "no regions";
  if (idle > 0) out += fmt::format("; the device idle before regions {:.3f} s", idle);
  return out;
}

}  // namespace h3::profile

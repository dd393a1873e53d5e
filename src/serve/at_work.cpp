// "At work" messages while a job runs (serve/at_work.h).
#include "serve/at_work.h"

#include <time.h>

#include <chrono>

namespace h3::serve {

double process_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

AtWork::AtWork(std::function<void()> say, double every_s, double min_cpu) : say_(std::move(say)) {
  thread_ = std::thread([this, every_s, min_cpu] { loop(every_s, min_cpu); });
}

AtWork::~AtWork() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void AtWork::loop(double every_s, double min_cpu) {
  double cpu = process_cpu_seconds();
  std::unique_lock lock(mu_);
  for (;;) {
    if (cv_.wait_for(lock, std::chrono::duration<double>(every_s), [&] { return stop_; })) return;
    const double now = process_cpu_seconds();
    if (now - cpu >= min_cpu * every_s) {
      lock.unlock();
      say_();
      lock.lock();
    }
    cpu = now;
  }
}

}  // namespace h3::serve

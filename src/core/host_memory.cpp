#include "core/host_memory.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace h3 {

namespace {

std::string read_text(const char* path) {
  std::ifstream in(path);
  if (!in) return "";
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

int64_t status_field(const char* name) {
  return std::max<int64_t>(proc_field_bytes(read_text("/proc/self/status"), name), 0);
}

// Resets the kernel's high-water mark of this process's RSS to its RSS now; false when refused.
bool reset_high_water_mark() {
  std::ofstream out("/proc/self/clear_refs");
  if (!out) return false;
  out << "5";
  out.flush();
  return static_cast<bool>(out);
}

}  // namespace

int64_t proc_field_bytes(const std::string& text, const std::string& name) {
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find('\n', pos), text.size());
    const std::string_view line(text.data() + pos, end - pos);
    pos = end + 1;
    if (line.size() <= name.size() || line.substr(0, name.size()) != name || line[name.size()] != ':') continue;
    const std::string rest(line.substr(name.size() + 1));
    char* after = nullptr;
    const long long v = std::strtoll(rest.c_str(), &after, 10);
    if (after == rest.c_str() || v < 0) return -1;
    const std::string unit(after);
    return unit.find("kB") != std::string::npos ? v * 1024 : v;
  }
  return -1;
}

HostMemory host_memory() {
  const std::string text = read_text("/proc/meminfo");
  HostMemory m;
  m.total = std::max<int64_t>(proc_field_bytes(text, "MemTotal"), 0);
  m.available = std::max<int64_t>(proc_field_bytes(text, "MemAvailable"), 0);
  return m;
}

int64_t process_rss_bytes() {
  return status_field("VmRSS");
}

PeakHostMemory::PeakHostMemory(int sample_ms, bool use_kernel_mark)
    : sample_ms_(std::max(sample_ms, 1)), use_kernel_mark_(use_kernel_mark) {
  restart();
}

PeakHostMemory::~PeakHostMemory() {
  stop_sampler();
}

void PeakHostMemory::stop_sampler() {
  if (!sampler_.joinable()) return;
  stop_ = true;
  sampler_.join();
  stop_ = false;
}

void PeakHostMemory::restart() {
  stop_sampler();
  exact_ = use_kernel_mark_ && reset_high_water_mark();
  if (exact_) return;
  sampled_ = process_rss_bytes();
  sampler_ = std::thread([this] {
    while (!stop_) {
      const int64_t now = process_rss_bytes();
      int64_t seen = sampled_.load();
      while (now > seen && !sampled_.compare_exchange_weak(seen, now)) {
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(sample_ms_));
    }
  });
}

int64_t PeakHostMemory::peak_bytes() const {
  const int64_t now = process_rss_bytes();
  return exact_ ? std::max(status_field("VmHWM"), now) : std::max(sampled_.load(), now);
}

}  // namespace h3

// Host memory figures (Linux /proc): what the machine has and has free, what this process holds, and the peak it
// reached during a phase of a run (the run record's per-phase peak host RSS; the layer streamer's choice between
// page-locked copies and a mapped checkpoint: io/layer_stream.h).
#pragma once
#include <atomic>
#include <cstdint>
#include <string>
#include <thread>

namespace h3 {

struct HostMemory {
  int64_t total = 0;      // MemTotal
  int64_t available = 0;  // MemAvailable: what can be given to a process without swapping (page cache included)
};
// From /proc/meminfo; zeros when it cannot be read.
HostMemory host_memory();
// This process's resident set now (VmRSS of /proc/self/status; 0 when unreadable).
int64_t process_rss_bytes();
// Field `name` of a /proc/meminfo or /proc/<pid>/status text ("MemAvailable:  123456 kB") in bytes; -1 when absent.
int64_t proc_field_bytes(const std::string& text, const std::string& name);

// The peak resident set of this process over a phase: from construction (or restart()) to peak_bytes(). The kernel's
// high-water mark (VmHWM) is reset by writing "5" to /proc/self/clear_refs; where that is refused (an old kernel, a
// sandbox) a thread samples VmRSS every `sample_ms` instead, which can miss a peak shorter than that. The mark is
// process-wide: run one at a time. use_kernel_mark = false samples even where the reset works (tests).
class PeakHostMemory {
 public:
  explicit PeakHostMemory(int sample_ms = 5, bool use_kernel_mark = true);
  ~PeakHostMemory();
  PeakHostMemory(const PeakHostMemory&) = delete;
  PeakHostMemory& operator=(const PeakHostMemory&) = delete;
  // Starts a new phase.
  void restart();
  // The peak RSS since the phase started, in bytes.
  int64_t peak_bytes() const;
  // Whether the kernel's mark is used (true) or sampling (false).
  bool exact() const { return exact_; }

 private:
  void stop_sampler();
  int sample_ms_;
  bool use_kernel_mark_;
  bool exact_ = false;
  std::atomic<int64_t> sampled_{0};
  std::atomic<bool> stop_{false};
  std::thread sampler_;
};

}  // namespace h3

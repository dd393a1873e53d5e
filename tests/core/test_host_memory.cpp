// Host memory figures (core/host_memory.h): /proc fields parsed to bytes, the machine's and this process's figures,
// and the per-phase peak through the kernel's resettable mark and through sampling.
#include <gtest/gtest.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

#include "core/host_memory.h"

using namespace h3;

namespace {

constexpr int64_t MiB = int64_t{1} << 20;

// Touches `bytes` of fresh memory (every page written), held until the pointer goes.
std::unique_ptr<char[]> touch(int64_t bytes) {
  std::unique_ptr<char[]> p(new char[static_cast<size_t>(bytes)]);
  for (int64_t i = 0; i < bytes; i += 4096) p[static_cast<size_t>(i)] = static_cast<char>(i);
  return p;
}

}  // namespace

TEST(HostMemory, ProcFieldsAreBytes) {
  const std::string meminfo = "MemTotal:       24589448 kB\nMemFree:         1234 kB\nMemAvailable:   20000000 kB\n";
  EXPECT_EQ(proc_field_bytes(meminfo, "MemTotal"), int64_t{24589448} * 1024);
  EXPECT_EQ(proc_field_bytes(meminfo, "MemAvailable"), int64_t{20000000} * 1024);
  EXPECT_EQ(proc_field_bytes(meminfo, "MemFree"), 1234 * 1024);
  EXPECT_EQ(proc_field_bytes(meminfo, "Mem"), -1);  // a prefix of a name is not the name
  EXPECT_EQ(proc_field_bytes(meminfo, "SwapTotal"), -1);
  EXPECT_EQ(proc_field_bytes("Threads:\t7\nVmHWM:\t  2048 kB\n", "Threads"), 7);
  EXPECT_EQ(proc_field_bytes("Threads:\t7\nVmHWM:\t  2048 kB\n", "VmHWM"), 2048 * 1024);
  EXPECT_EQ(proc_field_bytes("VmHWM: none\n", "VmHWM"), -1);
  const HostMemory m = host_memory();
  EXPECT_GT(m.total, 0);
  EXPECT_GT(m.available, 0);
  EXPECT_LE(m.available, m.total);
  EXPECT_GT(process_rss_bytes(), 0);
}

// A 256 MiB buffer touched and dropped inside a phase is its peak; the next phase starts from what is held now. Both
// ways of measuring: the kernel's mark (where the reset is allowed) and sampling every 2 ms.
TEST(HostMemory, PeakPerPhase) {
  for (const bool kernel : {true, false}) {
    PeakHostMemory peak(2, kernel);
    if (kernel && !peak.exact()) std::printf("/proc/self/clear_refs refused: the kernel's mark is not reset here\n");
    const int64_t before = process_rss_bytes();
    {
      auto p = touch(256 * MiB);
      if (!peak.exact()) std::this_thread::sleep_for(std::chrono::milliseconds(30));  // the sampler sees it
    }
    const int64_t high = peak.peak_bytes();
    EXPECT_GE(high, before + 240 * MiB) << "kernel mark " << kernel;
    peak.restart();
    EXPECT_LT(peak.peak_bytes(), high - 200 * MiB) << "kernel mark " << kernel;
  }
}

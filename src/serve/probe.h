// Media probing for uploads: scan_media (media/media_read.h) run in a child process (`h3 probe-media`) under
// resource limits, so that no upload can make the server allocate, spin or crash: the server's own memory does
// not move whatever a file declares, a decoder bug takes down only the child, and a file that needs more than
// the limits is refused with a 400 saying so. The scan's own limits (sizes, rates, durations) apply inside.
#pragma once
#include <cstdint>
#include <string>

#include "media/media_read.h"

namespace h3::serve {

struct ProbeLimits {
  double wall_s = 60;                  // the child is killed after this long
  int cpu_s = 60;                      // CPU seconds (RLIMIT_CPU)
  uint64_t memory_bytes = 3ull << 30;  // address space (RLIMIT_AS)
};

// Runs `self_exe probe-media PATH` and returns what it found; throws h3::Error with the scan's own message
// (or the limit that stopped it). `path` is named in messages as the scan names it.
MediaInfo probe_media(const std::string& self_exe, const std::string& path, int64_t max_frames, int64_t max_samples,
                      const ProbeLimits& limits = {});

}  // namespace h3::serve

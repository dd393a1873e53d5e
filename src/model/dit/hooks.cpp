#include "model/dit/hooks.h"

#include <cstdio>

#include "core/knobs.h"
#include "core/log.h"
#include "core/signals.h"

namespace h3 {

bool DitCapture::wants(const std::string& name) const {
  for (const std::string& p : prefixes)
    if (name.compare(0, p.size(), p) == 0) return true;
  return false;
}

FaultInjection FaultInjection::from_knobs() {
  FaultInjection f;
  if (const std::string e = debug_fault(); !e.empty()) {
    char what[16] = {0};
    if (std::sscanf(e.c_str(), "%d:%d:%15s", &f.rank, &f.block, what) == 3)
      f.kill = std::string(what) == "kill";
    else
      f.rank = -1;
  }
  return f;
}

void FaultInjection::at_block(int rank_now, int block_now) const {
  if (rank_now != rank || block_now != block) return;
  spdlog::warn("H3_DEBUG_FAULT: rank {} {} at block {}", rank, kill ? "killing itself" : "stalling", block);
  kill_or_stall(kill);
}

}  // namespace h3

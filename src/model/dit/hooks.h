// What the DiT forward (model/dit/forward.cpp) calls around its math for debugging and tests; none of it changes a
// number the forward computes.
//   DitCapture      which named intermediates a forward keeps, to compare with a reference's (style.md, habit 3):
//                   "token_refiner" [L, H] (the refined text rows), "block.N" [S, H] (the residual stream after
//                   block N), "norm_out" [S, H] (the final modulated norm), all rows gathered on every rank.
//   FaultInjection  the failure tests' H3_DEBUG_FAULT (core/knobs.h): a rank killed or stalled at a block's start.
// Profiling is the forward's profile::Region scopes (core/profile.h), free when --profile-regions is off.
#pragma once
#include <string>
#include <vector>

namespace h3 {

struct DitCapture {
  // An intermediate is kept when its name starts with one of these ("block." keeps every block, "block.3" block 3
  // and blocks 30-39, "" every intermediate). Every rank of a plan must ask for the same names: keeping one gathers
  // its rows from every rank.
  std::vector<std::string> prefixes;
  static DitCapture all() { return DitCapture{{""}}; }
  bool any() const { return !prefixes.empty(); }
  bool wants(const std::string& name) const;
};

// H3_DEBUG_FAULT="RANK:BLOCK:kill" (SIGKILL itself) or "RANK:BLOCK:stall" (sleep forever) at the start of that block.
// Never set in normal runs.
struct FaultInjection {
  int rank = -1, block = -1;
  bool kill = false;
  static FaultInjection from_knobs();
  void at_block(int rank_now, int block_now) const;
};

}  // namespace h3

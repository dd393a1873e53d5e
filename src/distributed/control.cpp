#include "distributed/control.h"

#include <vector>

#include "core/error.h"
#include "core/hash.h"

namespace h3 {

uint64_t shape_hash(const std::string& s) {
  return fnv1a(s);
}

void agree(Comm& comm, uint64_t op_id, uint64_t hash, const std::string& what) {
  if (comm.size() == 1) return;
  const uint64_t mine[2] = {op_id, hash};
  std::vector<uint64_t> all(2 * static_cast<size_t>(comm.size()));
  // Sent as i64 (same bits) so the generic gather can carry it.
  comm.allgatherv(mine, all.data(), std::vector<int64_t>(comm.size(), 2), DType::i64, what + " (agreement)");
  std::string differ;
  for (int r = 1; r < comm.size(); ++r)
    if (all[2 * r] != all[0] || all[2 * r + 1] != all[1])
      differ += fmt::format("{}rank {} (op {}, shapes {:016x})", differ.empty() ? "" : ", ", comm.world_rank(r),
                            all[2 * r], all[2 * r + 1]);
  if (!differ.empty())
    fail("{}: ranks disagree with rank 0 (op {}, shapes {:016x}): {} -- every rank must run the same request", what,
         all[0], all[1], differ);
}

ControlWord step_control(Comm& comm, ControlWord word_on_root) {
  int32_t w = static_cast<int32_t>(word_on_root);
  comm.broadcast(&w, sizeof(w), 0, "step control word");
  return static_cast<ControlWord>(w);
}

ControlWord synced_control(Comm& comm, ControlWord word_on_root) {
  const int32_t mine = comm.rank() == 0 ? static_cast<int32_t>(word_on_root) : 0;
  std::vector<int32_t> all(static_cast<size_t>(comm.size()));
  comm.allgatherv(&mine, all.data(), std::vector<int64_t>(all.size(), 1), DType::i32, "control word (synced)");
  return static_cast<ControlWord>(all[0]);
}

}  // namespace h3

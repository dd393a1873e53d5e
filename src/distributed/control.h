// The control plane: what every rank must agree on before tensors move, and the per-step control word.
#pragma once
#include <cstdint>
#include <string>

#include "distributed/comm.h"

namespace h3 {

// FNV-1a over a description of shapes (or any bytes), for the agreement check.
uint64_t shape_hash(const std::string& description);

// Every rank calls this with its operation id and shape hash before the first tensor collective of an operation.
// Throws on every rank (naming the ranks that differ from rank 0) when they do not all agree.
void agree(Comm& comm, uint64_t op_id, uint64_t hash, const std::string& what);

// suspend: stop at this denoising step boundary keeping the run's state, to resume it later (h3 serve's queue
// lets a job of higher priority run first); outside the denoising loop it reads as proceed.
enum class ControlWord : int32_t { proceed = 0, cancel = 1, suspend = 2 };
// Rank 0's word reaches every rank (the others' argument is ignored); called once per denoising step.
ControlWord step_control(Comm& comm, ControlWord word_on_root);
// The same word, read only once every rank has reached the call (an all-gather of one word each, rank 0's
// taken): a rank 0 with nothing to compute stays in step with ranks that do, so its word is current. The text
// tower's per-layer check uses it (its layers may run on encoder ranks that do not include rank 0).
ControlWord synced_control(Comm& comm, ControlWord word_on_root);

}  // namespace h3

// The CPU backend's entries (namespace h3::cpu), declared from the op list of ops/backend_ops.h with the public
// ops' parameters: f32 and f64 host tensors, already checked by the front door (src/ops). backend/cpu/table.cpp
// puts those the CPU implements into its table (attention_fp8_out and procedural are device ops: declared here,
// defined nowhere, left out of the table).
#pragma once
#include "ops/backend_ops.h"

namespace h3::cpu {

H3_DECLARE_BACKEND_ENTRIES()

}  // namespace h3::cpu

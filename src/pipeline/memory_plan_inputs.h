// The memory plan's inputs (pipeline/memory_plan.h) for a request on opened components: the models' configs,
// precisions and placement from the options, the packed length and latent sizes from the request. Shared by the
// Generator (before anything loads) and `h3 plan` (headers only, no GPU).
#pragma once
#include <cstdint>

#include "pipeline/components.h"
#include "pipeline/generator.h"
#include "pipeline/memory_plan.h"

namespace h3 {

// The inputs for request `r` on `world` ranks (the last o.encoder_ranks of them encode only) with `device_bytes`
// free on this rank's GPU; the budget, link and compute fields keep their defaults for the caller to set.
MemoryPlanInputs memory_plan_inputs(const ModelSources& s, const GenerateOptions& o, const ResolvedRequest& r,
                                    int world, int64_t device_bytes);

}  // namespace h3

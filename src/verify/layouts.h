// Checks our layout builder, row-timestep plans, schedules and Euler step against a golden layouts file
// (../shared/golden/layouts*.safetensors). Every layout is rebuilt from the geometry description in the
// file's metadata, never from its expected tensors, so other files of the same family verify the same way.
#pragma once
#include <cstdio>

#include "io/safetensors.h"

namespace h3 {

// True for files whose metadata carries layout geometries or which hold flow schedules.
bool looks_like_layout_golden(const SafeTensors& file);

// Prints one line per compared item and a final line starting with PASS or FAIL; returns 0 on PASS, 1 on
// FAIL.
int verify_layouts(const SafeTensors& file, std::FILE* out);

}  // namespace h3

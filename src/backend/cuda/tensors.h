// Internal to the CUDA backend: what its op files need to hand a core Tensor to a kernel. Nothing outside
// src/backend/cuda includes this.
#pragma once

#include "backend/cuda/elem_type.h"
#include "core/tensor.h"

namespace h3::cuda {

// The kernels' element type of a dtype; fails for one the backend has no tensors of.
ElemType elem_type(DType t);
// The tensor on the GPU in dtype dt (no copy when it already is).
Tensor on_gpu(const Tensor& t, DType dt);

}  // namespace h3::cuda

// Non-causal multi-head attention on the GPU for q [nq, heads*d], k/v [nk, heads*d] (bf16), softmax scale
// 1/sqrt(d): cuDNN's fused SDPA when the build has cuDNN and it accepts the shape, else a plain kernel.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.h"

namespace h3::cuda {

void attention(const void* q, const void* k, const void* v, void* o, DType t, int64_t nq, int64_t nk, int64_t heads,
               int64_t d);
// Which implementation attention() uses for bf16 at this shape ("cudnn-sdpa" or "simple"), building the plan if
// needed.
std::string attention_impl(int64_t nq, int64_t nk, int64_t heads, int64_t d);

}  // namespace h3::cuda

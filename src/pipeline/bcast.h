// Rank-to-rank transfers of the generator's inputs (host memory, through the group's communicator): tensors with
// their shape, strings, and the prepared prompt. Collective over `comm`.
#pragma once
#include <string>

#include "core/tensor.h"
#include "distributed/comm.h"
#include "pipeline/conditions.h"

namespace h3 {

// Shape first (ndim, dims), then the bytes; every rank ends with an f32 tensor.
void bcast_tensor(Comm& comm, Tensor& t, int root, const std::string& what);
std::string bcast_string(Comm& comm, const std::string& s, int root, const std::string& what);
// A tensor with its dtype kept (bcast_tensor sends f32): the vision rows of an f64 run stay f64. An undefined tensor
// stays undefined.
void bcast_tensor_as_is(Comm& comm, Tensor& t, int root, const std::string& what);
// The prepared prompt (PromptInputs) from `root` to every rank of `comm`.
void bcast_prompt(Comm& comm, PromptInputs& p, int root);

}  // namespace h3

// The sequence <-> head exchanges of the Ulysses modes, as index equations (D = head_dim):
//
// Members j = 0..U-1 of a sequence-parallel group hold row blocks G_j (contiguous, in order; their union is all
// rows) and want head ranges P_j (contiguous, in order, inside the head slice [h0, h1) every member projects).
//   seq_to_head: in  X_j [|G_j|, (h1-h0) D]       out Y_j [sum_i |G_i|, |P_j| D]
//                Y_j[off(G_i) + r, c] = X_i[r, (P_j.begin - h0) D + c]
//   head_to_seq: the inverse, in Y_j, out X_j:     X_j[r, (P_i.begin - h0) D + c] = Y_i[off(G_j) + r, c]
// Each exchange is issued as `chunks` asynchronous all-to-alls over sub-ranges of the heads (possibly empty), so
// the caller can compute the next projection while the previous one travels; chunking moves the same bytes to
// the same places and never changes a value. Tensors on a device are packed there (pitched copies) and must go
// through a communicator that takes device memory.
#pragma once
#include <functional>
#include <memory>
#include <vector>

#include "core/tensor.h"
#include "distributed/comm.h"
#include "distributed/partition.h"

namespace h3 {

class HeadExchange {
 public:
  HeadExchange(Comm& comm, std::vector<Range> row_blocks, std::vector<Range> head_parts, int64_t head_begin,
               int64_t head_dim, int chunks, std::string what);
  // Starts moving x (seq -> head); finish() returns Y.
  void start_seq_to_head(const Tensor& x);
  // Starts moving y (head -> seq); finish() returns X.
  void start_head_to_seq(const Tensor& y);
  Tensor finish();

 private:
  Comm& comm_;
  std::vector<Range> rows_, heads_;
  int64_t h0_, d_;
  int chunks_;
  std::string what_;
  std::vector<std::unique_ptr<Pending>> pending_;
  std::vector<Tensor> send_, recv_;  // byte buffers, on the device of the exchanged tensor
  std::function<Tensor()> unpack_;
};

}  // namespace h3

// How one DiT forward is spread over the ranks (the modes of the distributed issue).
//
// Ranks form a K x U mesh, rank = u * K + t: K tensor-parallel ranks (t) per row group, U sequence-parallel groups
// (u). Packed rows are split over all N = K * U ranks by the partition rule; rank r owns rows R_r.
//   ulysses     K = 1, U = N: q/k/v of own rows, all heads -> all-to-all -> all rows, own heads H_u; attention;
//               inverse all-to-all -> own rows, all heads; out_proj and the MLP row-local. Bitwise = 1 rank.
//   ulysses-ag  K = 1, U = N: all-gather the modulated hidden state (all rows), project only own heads H_u through
//               row slices of q/k/v; attention; inverse all-to-all; the rest as ulysses. Bitwise = 1 rank.
//   tensor      K = N, U = 1: all-gather rows, own head slice H_t and FFN column slice F_t, partial outputs
//               reduce-scattered back to row shards; AdaLN rows sharded, tables all-gathered once per forward.
//   hybrid      K = --tp, U = N / K: tensor within each row group G_u (the union of its K ranks' rows), ulysses
//               across the groups for the head slice H_t (split again over U).
#pragma once
#include <memory>
#include <string>

#include "distributed/comm.h"
#include "distributed/comm_device.h"
#include "distributed/partition.h"

namespace h3 {

enum class DistMode { ulysses, ulysses_ag, tensor, hybrid };
std::string_view dist_mode_name(DistMode m);
DistMode dist_mode_from_name(const std::string& s);

struct DistOptions {
  DistMode mode = DistMode::ulysses;
  int tp = 1;      // hybrid only: the tensor-parallel degree K
  int chunks = 1;  // each exchange is issued as this many asynchronous pieces (never changes a result)
  // This rank's GPU (its PCI bus id, backend/backend.h: gpu_bus_id()) when the model's tensors live on one, ""
  // on the CPU: ranks on distinct GPUs then exchange device tensors through NCCL (distributed/comm_device.h).
  std::string gpu_bus;
  // How device tensors travel (h3 --transport): NCCL where every rank has its own GPU (auto), always MPI through
  // host memory, or NCCL or an error.
  Transport transport = Transport::automatic;
};

struct DistPlan {
  DistMode mode = DistMode::ulysses;
  int world = 1, rank = 0;
  int K = 1, U = 1;  // tensor-parallel degree, sequence-parallel degree
  int t = 0, u = 0;  // this rank's coordinates
  int chunks = 1;
  Comm* world_comm = nullptr;
  std::shared_ptr<Comm> tp_comm, sp_comm;  // ranks with the same u (size K), with the same t (size U)
  // How device tensors travel: NCCL (tp_comm / sp_comm then take device buffers) or MPI through host memory.
  std::string transport = "mpi";

  // Builds the mesh over `comm` (all ranks must call it) and checks the model can be split this way.
  static DistPlan make(Comm& comm, const DistOptions& opt, int heads, int ffn_dim);
  // The whole model on one rank (no communication).
  static DistPlan single();

  std::string describe() const;
};

}  // namespace h3

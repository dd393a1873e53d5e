// Collectives on device memory: an NCCL communicator over the same ranks as a host (MPI) communicator.
//
// make_nccl_comm(host) is collective over `host`: rank 0 creates NCCL's unique id, MPI broadcasts it, every rank
// joins on its current GPU. The returned Comm takes device buffers (ragged all-to-all / all-gather as grouped
// ncclSend/ncclRecv on a communication stream; reduce-scatter and all-reduce as an all-to-all followed by a
// rank-ordered sum on the GPU, so results are bitwise those of the MPI transport) and passes host buffers on to
// `host`, which it keeps using for everything small (probes, barriers, liveness checks after a timeout).
//
// NCCL cannot put two ranks of one communicator on the same GPU: pick_device_transport() chooses NCCL only when
// every rank of `host` has its own GPU, else the MPI transport (device tensors staged through host memory).
#pragma once
#include <memory>
#include <string>

#include "distributed/comm.h"

namespace h3 {

enum class Transport { automatic, mpi, nccl };
Transport transport_from_name(const std::string& s);  // "auto", "mpi", "nccl"
std::string_view transport_name(Transport t);

// Whether this build has NCCL.
bool nccl_built();
// Collective over `host`. `host` must outlive the result unless `keep` owns it. Throws (naming the rank and cause)
// on failure.
std::unique_ptr<Comm> make_nccl_comm(Comm& host, std::shared_ptr<Comm> keep = nullptr);
// NCCL when `wanted` allows it (h3 --transport: auto, mpi, nccl) and every rank of `host` has a distinct GPU
// (collective over `host`); throws when nccl was asked for and cannot be honoured, saying why. `gpu_bus`: this
// rank's GPU (its PCI bus id), "" when it runs without one.
Transport pick_device_transport(Comm& host, const std::string& gpu_bus, Transport wanted);

}  // namespace h3

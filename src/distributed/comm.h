// Communicators behind one interface. Collectives are ragged (per-rank counts, contiguous by rank order) and are
// built from point-to-point messages, so a collective that does not complete in time can name the ranks whose
// messages never arrived. Reductions sum in rank order (0, 1, ..., n-1) so a result depends only on the world size.
//
// Host memory goes through MPI (or the size-1 local communicator); device memory through NCCL (CUDA builds, see
// distributed/comm_device.h): the NCCL communicator takes host buffers too and hands those to the MPI one beneath it.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"

namespace h3 {

// An exchange in flight; wait() completes it (or fails naming the missing ranks after the timeout).
class Pending {
 public:
  virtual ~Pending() = default;
  virtual void wait() = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // World rank of local rank r (for messages), and this process's host name.
  virtual int world_rank(int r) const = 0;
  virtual std::string host() const = 0;
  // Sub-communicator of the ranks sharing `color`, ordered by `key`.
  virtual std::unique_ptr<Comm> split(int color, int key) = 0;

  // recv[from j] = send[to me] of rank j. Counts in elements; blocks contiguous in rank order.
  virtual std::unique_ptr<Pending> ialltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                                              const std::vector<int64_t>& recv_counts, DType dt,
                                              const std::string& what) = 0;
  // Copies `bytes` from root to every rank.
  virtual void broadcast(void* buf, int64_t bytes, int root, const std::string& what) = 0;

  // True when the buffers may be device memory (NCCL); false: host memory only.
  virtual bool device_memory() const { return false; }

  // Derived collectives (point-to-point underneath; a device communicator overrides the virtual ones).
  void alltoallv(const void* send, const std::vector<int64_t>& send_counts, void* recv,
                 const std::vector<int64_t>& recv_counts, DType dt, const std::string& what);
  // recv = concat over ranks of each rank's `count` elements; counts[j] = rank j's count.
  virtual std::unique_ptr<Pending> iallgatherv(const void* send, void* recv, const std::vector<int64_t>& counts,
                                               DType dt, const std::string& what);
  void allgatherv(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt, const std::string& what);
  // send holds one block per destination (counts[j] elements for rank j); recv[counts[me]] = sum over ranks in rank
  // order of their block for me. f32, f64 and bf16 (summed in f32, rounded once) only.
  virtual void reduce_scatterv(const void* send, const std::vector<int64_t>& counts, void* recv, DType dt,
                               const std::string& what);
  virtual void allreduce_sum(const void* send, void* recv, int64_t count, DType dt, const std::string& what);
  virtual void barrier(const std::string& what);

  double timeout_s = 120.0;

 private:
  std::vector<std::byte> scratch_;  // reduce_scatterv's received parts, kept at the largest size asked
};

// The world: MPI's when running under mpirun/srun (MPI is initialised on first use), else a single local rank.
Comm& world();
bool in_mpi_job();
// The host name of world rank r (gathered when the world starts; this host's name outside MPI).
std::string host_of_world_rank(int r);
// A communicator of one rank (no MPI), for single-rank plans inside any job.
std::unique_ptr<Comm> make_local_comm();
// Ends the job from any rank after printing `message` (MPI_Abort under MPI, exit otherwise).
[[noreturn]] void abort_job(const std::string& message, int code = 3);
// Finalises MPI if it was initialised (call once before a normal exit).
void finalize_world();

}  // namespace h3

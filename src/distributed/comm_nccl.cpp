// The NCCL communicator (distributed/comm_device.h): device buffers travel through NCCL on a communication stream of
// their own, host buffers through the MPI communicator underneath. Every collective is a group of ncclSend /
// ncclRecv pairs (ragged counts need no padding); reductions are an all-to-all followed by a rank-ordered sum on
// the GPU. Waiting polls the completion event against the timeout, so a peer that stalls or dies fails this rank
// with a message instead of a hang, naming the missing ranks through an MPI liveness check.
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "backend/backend.h"
#include "core/log.h"
#include "core/tensor.h"
#include "distributed/comm_device.h"

#if H3_HAVE_NCCL
#include <nccl.h>

#include "backend/cuda/common.h"
#include "backend/cuda/reduce.h"
#endif

namespace h3 {

#if H3_HAVE_NCCL
namespace cuda {
ElemType elem_type(DType t);  // backend/cuda/runtime.cpp
}
#endif

bool nccl_built() {
#if H3_HAVE_NCCL
  return true;
#else
  return false;
#endif
}

#if !H3_HAVE_NCCL

std::unique_ptr<Comm> make_nccl_comm(Comm&, std::shared_ptr<Comm>) {
  fail(
      "--transport nccl: this h3 was built without NCCL (nccl.h and libnccl were not found at build time); "
      "install NCCL and rebuild, or use --transport mpi");
}

#else

namespace {

void nccl_check(ncclResult_t r, const char* call, const Comm& host, const std::string& what) {
  if (r == ncclSuccess) return;
  fail("rank {} ({}): {} failed in {}: {} ({}) -- rerun with NCCL_DEBUG=WARN for NCCL's own report", host.rank(),
       host.host(), what, call, ncclGetErrorString(r), ncclGetLastError(nullptr));
}
#define H3_NCCL(call, what) nccl_check((call), #call, host_, what)

bool is_device_pointer(const void* p) {
  if (!p) return false;
  cudaPointerAttributes a{};
  if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

class NcclComm;

class NcclPending : public Pending {
 public:
  NcclPending(NcclComm& owner, cudaEvent_t done, std::string what)
      : owner_(owner), done_(done), what_(std::move(what)) {}
  ~NcclPending() override;
  void wait() override;

 private:
  NcclComm& owner_;
  cudaEvent_t done_;
  std::string what_;
  bool finished_ = false;
};

class NcclComm : public Comm {
 public:
  explicit NcclComm(Comm& host) : host_(host) {
    timeout_s = host.timeout_s;
    if (!gpu_backend_started()) fail("the NCCL transport needs the GPU backend (--device cuda)");
    ncclUniqueId id{};
    if (host_.rank() == 0) H3_NCCL(ncclGetUniqueId(&id), "NCCL start-up");
    host_.broadcast(&id, sizeof(id), 0, "NCCL unique id");
    H3_NCCL(ncclCommInitRank(&comm_, host_.size(), id, host_.rank()), "NCCL start-up");
    H3_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    spdlog::debug("NCCL communicator: rank {} of {} on GPU {}", host_.rank(), host_.size(), gpu_bus_id());
  }
  ~NcclComm() override {
    if (comm_) ncclCommDestroy(comm_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  int rank() const override { return host_.rank(); }
  int size() const override { return host_.size(); }
  int world_rank(int r) const override { return host_.world_rank(r); }
  std::string host() const override { return host_.host(); }
  bool device_memory() const override { return true; }

  std::unique_ptr<Comm> split(int color, int key) override {
    std::unique_ptr<Comm> sub_host = host_.split(color, key);
    auto sub = std::make_unique<NcclComm>(*sub_host);
    sub->owned_host_ = std::move(sub_host);
    return sub;
  }

  std::unique_ptr<Pending> ialltoallv(const void* send, const std::vector<int64_t>& sc, void* recv,
                                      const std::vector<int64_t>& rc, DType dt, const std::string& what) override {
    if (!device_side(send, recv, what)) return host_.ialltoallv(send, sc, recv, rc, dt, what);
    const size_t es = dtype_size(dt);
    const int n = size(), me = rank();
    begin();
    H3_NCCL(ncclGroupStart(), what);
    int64_t so = 0, ro = 0;
    for (int j = 0; j < n; ++j) {
      const auto* s = static_cast<const std::byte*>(send) + so * es;
      auto* r = static_cast<std::byte*>(recv) + ro * es;
      if (j == me) {
        H3_ASSERT(sc[j] == rc[j], "{}: rank {} sends itself {} elements but expects {}", what, me, sc[j], rc[j]);
        if (sc[j] > 0 && s != r) H3_CUDA(cudaMemcpyAsync(r, s, sc[j] * es, cudaMemcpyDeviceToDevice, stream_));
      } else {
        if (sc[j] > 0) H3_NCCL(ncclSend(s, sc[j] * es, ncclUint8, j, comm_, stream_), what);
        if (rc[j] > 0) H3_NCCL(ncclRecv(r, rc[j] * es, ncclUint8, j, comm_, stream_), what);
      }
      so += sc[j];
      ro += rc[j];
    }
    H3_NCCL(ncclGroupEnd(), what);
    return end(what);
  }

  std::unique_ptr<Pending> iallgatherv(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt,
                                       const std::string& what) override {
    if (!device_side(send, recv, what)) return host_.iallgatherv(send, recv, counts, dt, what);
    const size_t es = dtype_size(dt);
    const int n = size(), me = rank();
    begin();
    H3_NCCL(ncclGroupStart(), what);
    int64_t off = 0;
    for (int j = 0; j < n; ++j) {
      auto* r = static_cast<std::byte*>(recv) + off * es;
      if (j == me) {
        if (counts[j] > 0 && r != send)
          H3_CUDA(cudaMemcpyAsync(r, send, counts[j] * es, cudaMemcpyDeviceToDevice, stream_));
      } else {
        if (counts[me] > 0) H3_NCCL(ncclSend(send, counts[me] * es, ncclUint8, j, comm_, stream_), what);
        if (counts[j] > 0) H3_NCCL(ncclRecv(r, counts[j] * es, ncclUint8, j, comm_, stream_), what);
      }
      off += counts[j];
    }
    H3_NCCL(ncclGroupEnd(), what);
    return end(what);
  }

  void reduce_scatterv(const void* send, const std::vector<int64_t>& counts, void* recv, DType dt,
                       const std::string& what) override {
    if (!device_side(send, recv, what)) return host_.reduce_scatterv(send, counts, recv, dt, what);
    const int n = size();
    const int64_t mine = counts.at(rank());
    Tensor parts(dt, {n, std::max<int64_t>(mine, 1)}, Device::cuda);
    ialltoallv(send, counts, parts.raw(), std::vector<int64_t>(n, mine), dt, what)->wait();
    H3_CUDA(cuda::sum_blocks(parts.raw(), cuda::elem_type(dt), n, mine, recv, cuda::stream()));
  }

  void allreduce_sum(const void* send, void* recv, int64_t count, DType dt, const std::string& what) override {
    if (!device_side(send, recv, what)) return host_.allreduce_sum(send, recv, count, dt, what);
    const int n = size();
    Tensor all(dt, {n, std::max<int64_t>(count, 1)}, Device::cuda);
    iallgatherv(send, all.raw(), std::vector<int64_t>(n, count), dt, what)->wait();
    H3_CUDA(cuda::sum_blocks(all.raw(), cuda::elem_type(dt), n, count, recv, cuda::stream()));
  }

  void broadcast(void* buf, int64_t bytes, int root, const std::string& what) override {
    if (!device_side(buf, buf, what)) return host_.broadcast(buf, bytes, root, what);
    begin();
    H3_NCCL(ncclBroadcast(buf, buf, bytes, ncclUint8, root, comm_, stream_), what);
    end(what)->wait();
  }

  void barrier(const std::string& what) override { host_.barrier(what); }
  void keep(std::shared_ptr<Comm> owner) { kept_host_ = std::move(owner); }

  // Called by a wait that ran past the timeout: NCCL cannot say who is missing, MPI can.
  [[noreturn]] void fail_timeout(const std::string& what, double waited) {
    ncclCommAbort(comm_);
    comm_ = nullptr;
    spdlog::error("rank {} ({}): NCCL exchange '{}' did not complete within {:.0f} s; checking which ranks answer",
                  rank(), host(), what, waited);
    host_.timeout_s = std::min(host_.timeout_s, 30.0);
    host_.barrier("liveness check after the NCCL timeout in '" + what + "'");
    abort_job(
        fmt::format("rank {} ({}): NCCL exchange '{}' did not complete within {:.0f} s although every rank "
                    "answers over MPI: NCCL itself stalled; rerun with NCCL_DEBUG=WARN, or --transport mpi",
                    rank(), host(), what, waited));
  }
  void check_async(const std::string& what) {
    ncclResult_t st = ncclSuccess;
    if (comm_ && ncclCommGetAsyncError(comm_, &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress)
      abort_job(fmt::format("rank {} ({}): NCCL reported '{}' during '{}' -- a peer rank probably died", rank(), host(),
                            ncclGetErrorString(st), what));
  }

 private:
  // Both buffers on the device -> NCCL; both on the host -> MPI; a mix is a caller bug.
  bool device_side(const void* a, const void* b, const std::string& what) const {
    const bool da = is_device_pointer(a), db = is_device_pointer(b);
    if (a && b && da != db)
      fail("{}: one buffer is in device memory and the other in host memory; both must be on the same side", what);
    return da || db;
  }
  // The communication stream waits for the work queued so far on the compute stream (which produced the data).
  void begin() {
    cudaEvent_t ready;
    H3_CUDA(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming));
    H3_CUDA(cudaEventRecord(ready, cuda::stream()));
    H3_CUDA(cudaStreamWaitEvent(stream_, ready, 0));
    H3_CUDA(cudaEventDestroy(ready));
  }
  std::unique_ptr<Pending> end(const std::string& what) {
    cudaEvent_t done;
    H3_CUDA(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    H3_CUDA(cudaEventRecord(done, stream_));
    return std::make_unique<NcclPending>(*this, done, what);
  }

  Comm& host_;
  std::unique_ptr<Comm> owned_host_;  // the MPI sub-communicator of a split
  std::shared_ptr<Comm> kept_host_;   // or one handed over by make_nccl_comm
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

NcclPending::~NcclPending() {
  if (!finished_) {
    try {
      wait();
    } catch (...) {
    }
  }
  cudaEventDestroy(done_);
}

void NcclPending::wait() {
  if (finished_) return;
  const auto start = std::chrono::steady_clock::now();
  int spins = 0;
  for (;;) {
    const cudaError_t e = cudaEventQuery(done_);
    if (e == cudaSuccess) break;
    if (e != cudaErrorNotReady) H3_CUDA(e);
    owner_.check_async(what_);
    if (++spins > 256) std::this_thread::sleep_for(std::chrono::microseconds(20));
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (waited > owner_.timeout_s) owner_.fail_timeout(what_, waited);
  }
  finished_ = true;
  // Later compute-stream work reads what arrived.
  H3_CUDA(cudaStreamWaitEvent(cuda::stream(), done_, 0));
}

}  // namespace

std::unique_ptr<Comm> make_nccl_comm(Comm& host, std::shared_ptr<Comm> keep) {
  auto c = std::make_unique<NcclComm>(host);
  c->keep(std::move(keep));
  return c;
}

#endif  // H3_HAVE_NCCL

}  // namespace h3

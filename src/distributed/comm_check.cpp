#include "distributed/comm_check.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/device.h"
#include "core/error.h"
#include "core/tensor.h"

namespace h3 {

namespace {

// The value rank `from` sends to rank `to` at position i: exact in f32.
float pattern(int from, int to, int64_t i) {
  return static_cast<float>(from * 4096 + to * 64 + (i % 61));
}

// Ragged count for (rank, size, base): no two ranks alike, some zero at small bases.
int64_t ragged(int r, int n, int64_t base) {
  return base + (r * 7 + n) % 5 - (base < 4 && r == n - 1 ? base : 0);
}

// Every rank's ragged block of a gather or scatter: the counts, their total and rank `me`'s offset.
struct RaggedBlocks {
  std::vector<int64_t> counts;
  int64_t total = 0, my_off = 0;
  RaggedBlocks(int n, int me, int64_t base) : counts(n) {
    for (int j = 0; j < n; ++j) {
      counts[j] = ragged(j, n, base);
      if (j < me) my_off += counts[j];
      total += counts[j];
    }
  }
};

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// A check's buffer: a host vector, mirrored in device memory when the communicator moves device memory (NCCL),
// so the same checks cover both transports.
template <typename T>
class Buf {
 public:
  Buf(const Comm& c, std::vector<T> v) : host_(std::move(v)) {
    if (!c.device_memory()) return;
    dev_ = Tensor(dtype_of<T>::value, {std::max<int64_t>(size(), 1)}, Device::cuda);
    if (size() > 0) device_hooks().copy(dev_.raw(), true, host_.data(), false, size() * sizeof(T));
  }
  T* ptr() { return dev_.on_device() ? static_cast<T*>(dev_.raw()) : host_.data(); }
  // The values now (copied back from the device).
  const std::vector<T>& read() {
    if (dev_.on_device() && size() > 0) device_hooks().copy(host_.data(), false, dev_.raw(), true, size() * sizeof(T));
    return host_;
  }
  int64_t size() const { return static_cast<int64_t>(host_.size()); }

 private:
  std::vector<T> host_;
  Tensor dev_;
};

}  // namespace

std::vector<CommCheckRow> run_comm_checks(Comm& comm, int64_t base) {
  const int n = comm.size(), me = comm.rank();
  std::vector<CommCheckRow> rows;
  auto finish = [&](CommCheckRow row, int64_t wrong, double t0) {
    row.seconds = now() - t0;
    int64_t total = 0;
    comm.allreduce_sum(&wrong, &total, 1, DType::i64, "comm check: wrong counts");
    row.wrong = total;
    rows.push_back(row);
  };
  for (int64_t b : {int64_t{0}, int64_t{1}, base}) {
    // all-to-all: to rank j, ragged(me + j) elements.
    {
      std::vector<int64_t> sc(n), rc(n);
      for (int j = 0; j < n; ++j) {
        sc[j] = ragged(me + j, n, b);
        rc[j] = ragged(j + me, n, b);
      }
      std::vector<float> send_v;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < sc[j]; ++i) send_v.push_back(pattern(me, j, i));
      int64_t total = 0;
      for (auto c : rc) total += c;
      Buf<float> send(comm, send_v), recv_b(comm, std::vector<float>(total, -1.0f));
      double t0 = now();
      comm.alltoallv(send.ptr(), sc, recv_b.ptr(), rc, DType::f32, "comm check: all-to-all");
      const std::vector<float>& recv = recv_b.read();
      int64_t wrong = 0, off = 0;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < rc[j]; ++i) wrong += recv[off++] != pattern(j, me, i);
      finish({"all-to-all", false, total}, wrong, t0);
    }
    // all-gather, out of place and in place (send aliases this rank's block of recv).
    for (bool in_place : {false, true}) {
      const RaggedBlocks blocks(n, me, b);
      const std::vector<int64_t>& counts = blocks.counts;
      const int64_t total = blocks.total, my_off = blocks.my_off;
      std::vector<float> recv_v(total, -1.0f), send_v(counts[me]);
      for (int64_t i = 0; i < counts[me]; ++i) send_v[i] = pattern(me, 0, i);
      if (in_place) std::memcpy(recv_v.data() + my_off, send_v.data(), send_v.size() * sizeof(float));
      Buf<float> send(comm, send_v), recv_b(comm, recv_v);
      double t0 = now();
      comm.allgatherv(in_place ? recv_b.ptr() + my_off : send.ptr(), recv_b.ptr(), counts, DType::f32,
                      "comm check: all-gather");
      const std::vector<float>& recv = recv_b.read();
      int64_t wrong = 0, off = 0;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < counts[j]; ++i) wrong += recv[off++] != pattern(j, 0, i);
      finish({"all-gather", in_place, total}, wrong, t0);
    }
    // reduce-scatter (sum in rank order), out of place and in place (recv aliases the start of send).
    for (bool in_place : {false, true}) {
      const RaggedBlocks blocks(n, me, b);
      const std::vector<int64_t>& counts = blocks.counts;
      std::vector<double> send_v(blocks.total);
      for (int j = 0, o = 0; j < n; ++j)
        for (int64_t i = 0; i < counts[j]; ++i) send_v[o++] = pattern(me, j, i);
      Buf<double> send(comm, send_v), out(comm, std::vector<double>(counts[me], -1.0));
      double t0 = now();
      comm.reduce_scatterv(send.ptr(), counts, in_place ? send.ptr() : out.ptr(), DType::f64,
                           "comm check: reduce-scatter");
      const double* dst = in_place ? send.read().data() : out.read().data();
      int64_t wrong = 0;
      for (int64_t i = 0; i < counts[me]; ++i) {
        double expect = 0;
        for (int r = 0; r < n; ++r) expect += pattern(r, me, i);
        wrong += dst[i] != expect;
      }
      finish({"reduce-scatter", in_place, counts[me]}, wrong, t0);
    }
    // broadcast from the last rank.
    {
      const int root = n - 1;
      const int64_t count = ragged(root, n, b);
      std::vector<float> buf_v(count, -1.0f);
      if (me == root)
        for (int64_t i = 0; i < count; ++i) buf_v[i] = pattern(root, 0, i);
      Buf<float> buf_b(comm, buf_v);
      double t0 = now();
      comm.broadcast(buf_b.ptr(), count * static_cast<int64_t>(sizeof(float)), root, "comm check: broadcast");
      const std::vector<float>& buf = buf_b.read();
      int64_t wrong = 0;
      for (int64_t i = 0; i < count; ++i) wrong += buf[i] != pattern(root, 0, i);
      finish({"broadcast", false, count}, wrong, t0);
    }
  }
  return rows;
}

void comm_probe(Comm& comm, const std::string& transport) {
  const int n = comm.size(), me = comm.rank();
  auto complain = [&](const std::string& what) {
    fail(
        "rank {} ({}): {} startup probe failed: {} -- likely causes: ranks started with different binaries or "
        "settings, a broken interconnect, or (NCCL) GPUs not visible to each other; rerun with NCCL_DEBUG=INFO "
        "or --log-level debug",
        comm.world_rank(me), comm.host(), transport, what);
  };
  Buf<int64_t> mine(comm, {me + 1}), sum_b(comm, {0});
  comm.allreduce_sum(mine.ptr(), sum_b.ptr(), 1, DType::i64, transport + " probe all-reduce");
  const int64_t sum = sum_b.read()[0];
  if (sum != static_cast<int64_t>(n) * (n + 1) / 2)
    complain(fmt::format("all-reduce of rank+1 gave {}, expected {}", sum, static_cast<int64_t>(n) * (n + 1) / 2));
  std::vector<int32_t> send_v(n);
  for (int j = 0; j < n; ++j) send_v[j] = me * 1000 + j;
  Buf<int32_t> send(comm, send_v), recv_b(comm, std::vector<int32_t>(n, -1));
  comm.alltoallv(send.ptr(), std::vector<int64_t>(n, 1), recv_b.ptr(), std::vector<int64_t>(n, 1), DType::i32,
                 transport + " probe all-to-all");
  const std::vector<int32_t>& recv = recv_b.read();
  for (int j = 0; j < n; ++j)
    if (recv[j] != j * 1000 + me)
      complain(fmt::format("all-to-all from rank {} gave {}, expected {}", j, recv[j], j * 1000 + me));
}

}  // namespace h3

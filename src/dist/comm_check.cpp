#include "dist/comm_check.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "core/error.h"

namespace h3 {

namespace {

// The value rank `from` sends to rank `to` at position i: exact in f32.
float pattern(int from, int to, int64_t i) { return static_cast<float>(from * 4096 + to * 64 + (i % 61)); }

// Ragged count for (rank, size, base): no two ranks alike, some zero at small bases.
int64_t ragged(int r, int n, int64_t base) { return base + (r * 7 + n) % 5 - (base < 4 && r == n - 1 ? base : 0); }

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

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
      std::vector<float> send, recv;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < sc[j]; ++i) send.push_back(pattern(me, j, i));
      int64_t total = 0;
      for (auto c : rc) total += c;
      recv.assign(total, -1.0f);
      double t0 = now();
      comm.alltoallv(send.data(), sc, recv.data(), rc, DType::f32, "comm check: all-to-all");
      int64_t wrong = 0, off = 0;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < rc[j]; ++i) wrong += recv[off++] != pattern(j, me, i);
      finish({"all-to-all", false, total}, wrong, t0);
    }
    // all-gather, out of place and in place (send aliases this rank's block of recv).
    for (bool in_place : {false, true}) {
      std::vector<int64_t> counts(n);
      int64_t total = 0, my_off = 0;
      for (int j = 0; j < n; ++j) {
        counts[j] = ragged(j, n, b);
        if (j < me) my_off += counts[j];
        total += counts[j];
      }
      std::vector<float> recv(total, -1.0f), send(counts[me]);
      for (int64_t i = 0; i < counts[me]; ++i) send[i] = pattern(me, 0, i);
      if (in_place) std::memcpy(recv.data() + my_off, send.data(), send.size() * sizeof(float));
      double t0 = now();
      comm.allgatherv(in_place ? recv.data() + my_off : send.data(), recv.data(), counts, DType::f32,
                      "comm check: all-gather");
      int64_t wrong = 0, off = 0;
      for (int j = 0; j < n; ++j)
        for (int64_t i = 0; i < counts[j]; ++i) wrong += recv[off++] != pattern(j, 0, i);
      finish({"all-gather", in_place, total}, wrong, t0);
    }
    // reduce-scatter (sum in rank order), out of place and in place (recv aliases the start of send).
    for (bool in_place : {false, true}) {
      std::vector<int64_t> counts(n);
      int64_t total = 0, my_off = 0;
      for (int j = 0; j < n; ++j) {
        counts[j] = ragged(j, n, b);
        if (j < me) my_off += counts[j];
        total += counts[j];
      }
      std::vector<double> send(total), out(counts[me], -1.0);
      for (int j = 0, o = 0; j < n; ++j)
        for (int64_t i = 0; i < counts[j]; ++i) send[o++] = pattern(me, j, i);
      double t0 = now();
      double* dst = in_place ? send.data() : out.data();
      comm.reduce_scatterv(send.data(), counts, dst, DType::f64, "comm check: reduce-scatter");
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
      std::vector<float> buf(count, -1.0f);
      if (me == root)
        for (int64_t i = 0; i < count; ++i) buf[i] = pattern(root, 0, i);
      double t0 = now();
      comm.broadcast(buf.data(), count * static_cast<int64_t>(sizeof(float)), root, "comm check: broadcast");
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
    fail("rank {} ({}): {} startup probe failed: {} -- likely causes: ranks started with different binaries or "
         "settings, a broken interconnect, or (NCCL) GPUs not visible to each other; rerun with NCCL_DEBUG=INFO "
         "or --log-level debug",
         comm.world_rank(me), comm.host(), transport, what);
  };
  int64_t mine = me + 1, sum = 0;
  comm.allreduce_sum(&mine, &sum, 1, DType::i64, transport + " probe all-reduce");
  if (sum != static_cast<int64_t>(n) * (n + 1) / 2)
    complain(fmt::format("all-reduce of rank+1 gave {}, expected {}", sum, static_cast<int64_t>(n) * (n + 1) / 2));
  std::vector<int32_t> send(n), recv(n, -1);
  for (int j = 0; j < n; ++j) send[j] = me * 1000 + j;
  comm.alltoallv(send.data(), std::vector<int64_t>(n, 1), recv.data(), std::vector<int64_t>(n, 1), DType::i32,
                 transport + " probe all-to-all");
  for (int j = 0; j < n; ++j)
    if (recv[j] != j * 1000 + me)
      complain(fmt::format("all-to-all from rank {} gave {}, expected {}", j, recv[j], j * 1000 + me));
}

}  // namespace h3

// The MPI communicator (host memory) and the size-1 local one. Every collective is a set of Isend/Irecv pairs
// polled until done or until the timeout, after which the ranks whose messages are missing are named.
#define OMPI_SKIP_MPICXX 1  // the C API only; no C++ bindings
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "core/error.h"
#include "core/knobs.h"
#include "core/log.h"
#include "distributed/comm.h"

namespace h3 {

namespace {

// Bytes per MPI message. A larger transfer goes as several, so that the waiting loop sees it advance (a completed
// message is its only sign of progress): a 203 MB tensor-mode exchange as one message looks idle until its end.
constexpr int64_t kMessageBytes = int64_t{8} << 20;
// How long the waiting loop polls without pause after the start or the last completed message, before it sleeps
// between polls. OpenMPI's shared-memory transport moves a large message in fragments that advance only while both
// sides poll (without its single-copy mechanism, as in containers); sleeping 50 us between polls from the start
// made a 768p tensor-mode DiT call over MPI take 205-267 s on an H100 host, and a 271 MB all-to-all 199 ms instead
// of 26 ms on a 2-core host. Past it a peer is computing, and an oversubscribed CPU run gets the core back.
constexpr double kBusyPollS = 0.010;
// Seconds a rank that calls abort_job gives MPI_Abort before it exits by itself.
constexpr double kAbortGraceS = 3.0;

std::string this_host() {
  char buf[256] = {0};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Where each rank's block starts, in bytes, when blocks of counts[j] elements of es bytes lie one after another.
std::vector<int64_t> byte_offsets(const std::vector<int64_t>& counts, int64_t es) {
  std::vector<int64_t> off(counts.size());
  for (size_t j = 1; j < counts.size(); ++j) off[j] = off[j - 1] + counts[j - 1] * es;
  return off;
}

bool g_mpi_initialised = false;
std::vector<std::string> g_hosts;  // by world rank

void mpi_check(int rc, const std::string& what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  int wr = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &wr);
  abort_job(fmt::format("rank {} ({}): {} failed in MPI: {} -- a peer rank probably died; see the launcher's report",
                        wr, this_host(), what, std::string(msg, len)));
}

class MpiPending : public Pending {
 public:
  MpiPending(std::vector<MPI_Request> reqs, std::vector<int> peers, std::vector<bool> is_recv, double timeout,
             std::string what, int me)
      : reqs_(std::move(reqs)),
        peers_(std::move(peers)),
        is_recv_(std::move(is_recv)),
        timeout_(timeout),
        what_(std::move(what)),
        me_(me) {}
  ~MpiPending() override {
    if (!done_ && !reqs_.empty()) wait();
  }
  void wait() override {
    if (done_) return;
    done_ = true;
    if (reqs_.empty()) return;
    using clock = std::chrono::steady_clock;
    const auto start = clock::now();
    auto last_progress = start;
    size_t left = reqs_.size();
    std::vector<int> done_idx(reqs_.size());
    for (;;) {
      int got = 0;  // completed requests become MPI_REQUEST_NULL; MPI_UNDEFINED: none was active any more
      mpi_check(MPI_Testsome(static_cast<int>(reqs_.size()), reqs_.data(), &got, done_idx.data(), MPI_STATUSES_IGNORE),
                what_);
      if (got == MPI_UNDEFINED) return;
      const auto now = clock::now();
      if (got > 0) {
        left -= static_cast<size_t>(got);
        if (left == 0) return;
        last_progress = now;
      }
      if (std::chrono::duration<double>(now - last_progress).count() < kBusyPollS)
        std::this_thread::yield();
      else
        std::this_thread::sleep_for(std::chrono::microseconds(50));
      const double waited = std::chrono::duration<double>(now - start).count();
      if (waited > timeout_) fail_timeout(waited);
    }
  }

 private:
  [[noreturn]] void fail_timeout(double waited) {
    std::string missing;
    for (size_t i = 0; i < reqs_.size(); ++i) {
      int flag = 0;
      MPI_Test(&reqs_[i], &flag, MPI_STATUS_IGNORE);
      if (!flag && is_recv_[i]) {
        const int p = peers_[i];
        std::string host = p < static_cast<int>(g_hosts.size()) ? g_hosts[p] : "?";
        std::string entry = fmt::format("rank {} ({})", p, host);
        if (missing.find(entry) == std::string::npos) missing += (missing.empty() ? "" : ", ") + entry;
      }
    }
    if (missing.empty()) missing = "none pending on receive; a peer is not receiving";
    abort_job(fmt::format("rank {} ({}): '{}' did not complete within {:.0f} s (timeout {:.0f} s): no data from {} "
                          "-- that rank died or stalled; check its log, or raise --timeout",
                          me_, this_host(), what_, waited, timeout_, missing),
              4);
  }
  std::vector<MPI_Request> reqs_;
  std::vector<int> peers_;
  std::vector<bool> is_recv_;
  double timeout_;
  std::string what_;
  int me_;
  bool done_ = false;
};

class DonePending : public Pending {
 public:
  void wait() override {}
};

class MpiComm : public Comm {
 public:
  MpiComm(MPI_Comm c, bool owned) : comm_(c), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
    MPI_Group g, wg;
    MPI_Comm_group(comm_, &g);
    MPI_Comm_group(MPI_COMM_WORLD, &wg);
    std::vector<int> local(size_), global(size_);
    for (int i = 0; i < size_; ++i) local[i] = i;
    MPI_Group_translate_ranks(g, size_, local.data(), wg, global.data());
    world_ranks_ = global;
    MPI_Group_free(&g);
    MPI_Group_free(&wg);
  }
  ~MpiComm() override {
    if (owned_ && comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int world_rank(int r) const override { return world_ranks_.at(r); }
  std::string host() const override { return this_host(); }

  std::unique_ptr<Comm> split(int color, int key) override {
    MPI_Comm sub;
    mpi_check(MPI_Comm_split(comm_, color, key, &sub), "communicator split");
    MPI_Comm_set_errhandler(sub, MPI_ERRORS_RETURN);
    auto c = std::make_unique<MpiComm>(sub, true);
    c->timeout_s = timeout_s;
    return c;
  }

  std::unique_ptr<Pending> ialltoallv(const void* send, const std::vector<int64_t>& sc, void* recv,
                                      const std::vector<int64_t>& rc, DType dt, const std::string& what) override {
    H3_ASSERT(static_cast<int>(sc.size()) == size_ && static_cast<int>(rc.size()) == size_,
              "{}: {} send / {} recv counts for {} ranks", what, sc.size(), rc.size(), size_);
    const int64_t es = static_cast<int64_t>(dtype_size(dt));
    const auto* s = static_cast<const std::byte*>(send);
    auto* r = static_cast<std::byte*>(recv);
    const std::vector<int64_t> sdisp = byte_offsets(sc, es), rdisp = byte_offsets(rc, es);
    // Receives first, then sends; the local block is a copy.
    Messages m(*this, what);
    for (int k = 1; k < size_; ++k) {
      const int j = (rank_ + size_ - k) % size_;
      m.post(true, j, r + rdisp[j], rc[j] * es);
    }
    for (int k = 1; k < size_; ++k) {
      const int j = (rank_ + k) % size_;
      m.post(false, j, const_cast<std::byte*>(s + sdisp[j]), sc[j] * es);
    }
    H3_ASSERT(sc[rank_] == rc[rank_], "{}: self block {} != {}", what, sc[rank_], rc[rank_]);
    if (sc[rank_]) std::memmove(r + rdisp[rank_], s + sdisp[rank_], sc[rank_] * es);
    return m.pending();
  }

  // Every rank's block straight from its one send buffer to each peer (no copy per destination, as the base's
  // all-to-all needs).
  std::unique_ptr<Pending> iallgatherv(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt,
                                       const std::string& what) override {
    H3_ASSERT(static_cast<int>(counts.size()) == size_, "{}: {} counts for {} ranks", what, counts.size(), size_);
    const int64_t es = static_cast<int64_t>(dtype_size(dt));
    auto* r = static_cast<std::byte*>(recv);
    const std::vector<int64_t> disp = byte_offsets(counts, es);
    Messages m(*this, what);
    for (int k = 1; k < size_; ++k) {
      const int j = (rank_ + size_ - k) % size_;
      m.post(true, j, r + disp[j], counts[j] * es);
    }
    auto* mine = const_cast<std::byte*>(static_cast<const std::byte*>(send));
    for (int k = 1; k < size_; ++k) m.post(false, (rank_ + k) % size_, mine, counts[rank_] * es);
    if (counts[rank_]) std::memmove(r + disp[rank_], mine, counts[rank_] * es);
    return m.pending();
  }

  void broadcast(void* buf, int64_t bytes, int root, const std::string& what) override {
    Messages m(*this, what);
    auto* b = static_cast<std::byte*>(buf);
    if (rank_ != root) {
      m.post(true, root, b, bytes);
    } else {
      for (int j = 0; j < size_; ++j)
        if (j != root) m.post(false, j, b, bytes);
    }
    m.pending()->wait();
  }

 private:
  // The messages of one collective: each peer's bytes as messages of at most kMessageBytes under the collective's
  // tag (MPI keeps messages of one tag between two ranks in order), polled together by MpiPending.
  class Messages {
   public:
    Messages(MpiComm& c, const std::string& what) : c_(c), what_(what), tag_(1 + static_cast<int>(c.seq_++ % 30000)) {}
    void post(bool is_recv, int j, std::byte* p, int64_t bytes) {
      for (int64_t off = 0; off < bytes || (off == 0 && bytes == 0); off += kMessageBytes) {
        const int n = static_cast<int>(std::min(kMessageBytes, bytes - off));
        MPI_Request q;
        mpi_check(is_recv ? MPI_Irecv(p + off, n, MPI_BYTE, j, tag_, c_.comm_, &q)
                          : MPI_Isend(p + off, n, MPI_BYTE, j, tag_, c_.comm_, &q),
                  what_);
        reqs_.push_back(q);
        peers_.push_back(c_.world_ranks_[j]);
        is_recv_.push_back(is_recv);
        if (bytes == 0) break;
      }
    }
    std::unique_ptr<Pending> pending() {
      return std::make_unique<MpiPending>(std::move(reqs_), std::move(peers_), std::move(is_recv_), c_.timeout_s, what_,
                                          c_.world_ranks_[c_.rank_]);
    }

   private:
    MpiComm& c_;
    std::string what_;
    int tag_;
    std::vector<MPI_Request> reqs_;
    std::vector<int> peers_;
    std::vector<bool> is_recv_;
  };

  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
  std::vector<int> world_ranks_;
  uint64_t seq_ = 0;
};

class LocalComm : public Comm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  int world_rank(int) const override { return 0; }
  std::string host() const override { return this_host(); }
  std::unique_ptr<Comm> split(int, int) override { return std::make_unique<LocalComm>(); }
  std::unique_ptr<Pending> ialltoallv(const void* send, const std::vector<int64_t>& sc, void* recv,
                                      const std::vector<int64_t>& rc, DType dt, const std::string& what) override {
    H3_ASSERT(sc.size() == 1 && rc.size() == 1 && sc[0] == rc[0], "{}: local exchange counts", what);
    if (sc[0]) std::memmove(recv, send, static_cast<size_t>(sc[0]) * dtype_size(dt));
    return std::make_unique<DonePending>();
  }
  void broadcast(void*, int64_t, int, const std::string&) override {}
};

}  // namespace

std::unique_ptr<Comm> make_local_comm() {
  return std::make_unique<LocalComm>();
}

std::string host_of_world_rank(int r) {
  if (g_hosts.empty()) return this_host();
  return r >= 0 && r < static_cast<int>(g_hosts.size()) ? g_hosts[static_cast<size_t>(r)] : "?";
}

bool in_mpi_job() {
  return knobs().in_mpi_job;
}

Comm& world() {
  static std::unique_ptr<Comm> w = []() -> std::unique_ptr<Comm> {
    if (!in_mpi_job()) return std::make_unique<LocalComm>();
    int provided = 0;
    MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
    g_mpi_initialised = true;
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    auto c = std::make_unique<MpiComm>(MPI_COMM_WORLD, false);
    // Host names of every rank, for messages that name a peer.
    std::string me = this_host();
    char name[256] = {0};
    std::strncpy(name, me.c_str(), sizeof(name) - 1);
    std::vector<char> all(256 * static_cast<size_t>(c->size()));
    c->allgatherv(name, all.data(), std::vector<int64_t>(c->size(), 256), DType::u8, "host names");
    for (int r = 0; r < c->size(); ++r) g_hosts.emplace_back(all.data() + 256 * r);
    return c;
  }();
  return *w;
}

void abort_job(const std::string& message, int code) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  if (g_mpi_initialised) {
    // MPI_Abort asks the launcher to end every rank, which it cannot finish when a host is unreachable (its
    // daemon never answers); this rank leaves by itself after kAbortGraceS either way, and the launcher sees
    // it exit with `code`.
    std::thread([code] {
      std::this_thread::sleep_for(std::chrono::duration<double>(kAbortGraceS));
      std::fflush(stderr);
      std::_Exit(code);
    }).detach();
    MPI_Abort(MPI_COMM_WORLD, code);
  }
  std::_Exit(code);
}

void finalize_world() {
  if (g_mpi_initialised) {
    MPI_Finalize();
    g_mpi_initialised = false;
  }
}

}  // namespace h3

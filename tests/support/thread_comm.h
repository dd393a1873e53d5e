// Ranks as threads of one process, for unit tests of collective code on the CPU without mpirun: run_ranks(n, fn)
// calls fn(comm) on n threads, each with its own rank of one communicator, and rethrows the first failure. Every
// collective is one synchronous round (post the buffers, wait for all ranks, copy, wait again so that no send buffer
// is released while a peer reads it), so the bytes each rank receives are those an MPI run would deliver. split() is
// not supported; a round that some rank never joins fails after `timeout_s` instead of hanging the test.
#pragma once
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "distributed/comm.h"

namespace h3::test {

class ThreadGroup {
 public:
  explicit ThreadGroup(int n) : n_(n), posts_(static_cast<size_t>(n)) {}
  int size() const { return n_; }

  struct Post {
    const void* send = nullptr;
    std::vector<int64_t> counts;  // per destination, elements
  };
  // Publishes this rank's buffer, waits for every rank's, runs `read` over all posts, waits until every rank has
  // read.
  template <typename Read>
  void round(int rank, Post post, const std::string& what, Read&& read) {
    posts_[static_cast<size_t>(rank)] = std::move(post);
    arrive(what);
    read(posts_);
    arrive(what);
  }

 private:
  void arrive(const std::string& what) {
    std::unique_lock lock(mu_);
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    if (!cv_.wait_for(lock, std::chrono::duration<double>(timeout_s), [&] { return generation_ != gen; }))
      fail("thread communicator: '{}' not joined by all {} ranks within {} s", what, n_, timeout_s);
  }

  int n_;
  std::vector<Post> posts_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;

 public:
  double timeout_s = 60.0;
};

class ThreadComm : public Comm {
 public:
  ThreadComm(ThreadGroup& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size(); }
  int world_rank(int r) const override { return r; }
  std::string host() const override { return "threads"; }
  std::unique_ptr<Comm> split(int, int) override { fail("thread communicator: split is not supported"); }

  std::unique_ptr<Pending> ialltoallv(const void* send, const std::vector<int64_t>& sc, void* recv,
                                      const std::vector<int64_t>& rc, DType dt, const std::string& what) override {
    const size_t es = dtype_size(dt);
    g_.round(rank_, {send, sc}, what, [&](const std::vector<ThreadGroup::Post>& posts) {
      size_t at = 0;
      for (int j = 0; j < size(); ++j) {
        const ThreadGroup::Post& p = posts[static_cast<size_t>(j)];
        H3_CHECK(p.counts[static_cast<size_t>(rank_)] == rc[static_cast<size_t>(j)],
                 "{}: rank {} sends {} elements to rank {}, which expects {}", what, j,
                 p.counts[static_cast<size_t>(rank_)], rank_, rc[static_cast<size_t>(j)]);
        size_t from = 0;
        for (int d = 0; d < rank_; ++d) from += static_cast<size_t>(p.counts[static_cast<size_t>(d)]) * es;
        const size_t bytes = static_cast<size_t>(rc[static_cast<size_t>(j)]) * es;
        if (bytes) std::memcpy(static_cast<std::byte*>(recv) + at, static_cast<const std::byte*>(p.send) + from, bytes);
        at += bytes;
      }
    });
    struct Done : Pending {
      void wait() override {}
    };
    return std::make_unique<Done>();
  }

  void broadcast(void* buf, int64_t bytes, int root, const std::string& what) override {
    g_.round(rank_, {buf, {}}, what, [&](const std::vector<ThreadGroup::Post>& posts) {
      if (rank_ != root && bytes > 0)
        std::memcpy(buf, posts[static_cast<size_t>(root)].send, static_cast<size_t>(bytes));
    });
  }

 private:
  ThreadGroup& g_;
  int rank_;
};

// fn(comm) on n threads, one rank each; the first exception (by rank) is rethrown once all have ended.
template <typename Fn>
void run_ranks(int n, Fn&& fn) {
  ThreadGroup group(n);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        ThreadComm comm(group, r);
        fn(static_cast<Comm&>(comm));
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace h3::test

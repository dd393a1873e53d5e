#include "distributed/comm.h"

#include <cstring>
#include <numeric>

#include "core/dtype.h"
#include "core/error.h"
#include "core/parallel.h"

namespace h3 {

void Comm::alltoallv(const void* send, const std::vector<int64_t>& sc, void* recv, const std::vector<int64_t>& rc,
                     DType dt, const std::string& what) {
  ialltoallv(send, sc, recv, rc, dt, what)->wait();
}

std::unique_ptr<Pending> Comm::iallgatherv(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt,
                                           const std::string& what) {
  // Every rank sends its block to everyone: an all-to-all whose send blocks all alias the same buffer.
  const int n = size();
  const int64_t mine = counts.at(rank());
  const size_t es = dtype_size(dt);
  std::vector<int64_t> sc(n, mine);
  // The send side must be one buffer with a block per destination: replicate (cheap next to the receive).
  auto staged = std::make_shared<std::vector<std::byte>>(static_cast<size_t>(mine * n) * es);
  for (int j = 0; j < n; ++j) std::memcpy(staged->data() + j * mine * es, send, mine * es);
  struct Holder : Pending {
    std::shared_ptr<std::vector<std::byte>> buf;
    std::unique_ptr<Pending> inner;
    void wait() override { inner->wait(); }
  };
  auto h = std::make_unique<Holder>();
  h->buf = staged;
  h->inner = ialltoallv(staged->data(), sc, recv, counts, dt, what);
  return h;
}

void Comm::allgatherv(const void* send, void* recv, const std::vector<int64_t>& counts, DType dt,
                      const std::string& what) {
  iallgatherv(send, recv, counts, dt, what)->wait();
}

namespace {

// out[i] = parts[0][i] + parts[1][i] + ... + parts[n-1][i] for i in [begin, end), in rank order (parts: n blocks of
// `count` values each), so that every rank forms the same bits.
template <typename T>
void sum_in_rank_order(const std::byte* parts, int n, int64_t count, int64_t begin, int64_t end, void* out) {
  const T* p = reinterpret_cast<const T*>(parts);
  T* o = static_cast<T*>(out);
  for (int64_t i = begin; i < end; ++i) {
    T acc = p[i];
    for (int j = 1; j < n; ++j) acc += p[j * count + i];
    o[i] = acc;
  }
}

}  // namespace

void Comm::reduce_scatterv(const void* send, const std::vector<int64_t>& counts, void* recv, DType dt,
                           const std::string& what) {
  H3_ASSERT(dt == DType::f32 || dt == DType::f64 || dt == DType::bf16, "reduce_scatterv on {}", dtype_name(dt));
  const int n = size();
  const int64_t mine = counts.at(rank());
  const size_t es = dtype_size(dt);
  // The parts land in a buffer kept between calls: a fresh one of a 768p tensor-mode exchange (203 MB) costs its
  // page faults at every call, twice a block.
  const size_t need = static_cast<size_t>(mine * n) * es;
  if (scratch_.size() < need) scratch_.resize(need);
  std::byte* parts = scratch_.data();
  alltoallv(send, counts, parts, std::vector<int64_t>(n, mine), dt, what);
  // Each element's sum is formed by one thread in rank order: the same bits for any thread count.
  parallel_for(
      mine,
      [&](int64_t b, int64_t e) {
        if (dt == DType::f32) {
          sum_in_rank_order<float>(parts, n, mine, b, e, recv);
        } else if (dt == DType::f64) {
          sum_in_rank_order<double>(parts, n, mine, b, e, recv);
        } else {
          // bf16 partials (GPU tensor parallelism): summed in f32 in rank order, rounded once.
          const auto* p = reinterpret_cast<const uint16_t*>(parts);
          auto* o = static_cast<uint16_t*>(recv);
          for (int64_t i = b; i < e; ++i) {
            float acc = bf16_to_f32(p[i]);
            for (int j = 1; j < n; ++j) acc += bf16_to_f32(p[j * mine + i]);
            o[i] = f32_to_bf16(acc);
          }
        }
      },
      int64_t{1} << 16);
}

void Comm::allreduce_sum(const void* send, void* recv, int64_t count, DType dt, const std::string& what) {
  // Everyone gathers everything and sums in rank order: identical bits on every rank.
  const int n = size();
  const size_t es = dtype_size(dt);
  std::vector<std::byte> all(static_cast<size_t>(count * n) * es);
  allgatherv(send, all.data(), std::vector<int64_t>(n, count), dt, what);
  if (dt == DType::f32)
    sum_in_rank_order<float>(all.data(), n, count, 0, count, recv);
  else if (dt == DType::f64)
    sum_in_rank_order<double>(all.data(), n, count, 0, count, recv);
  else if (dt == DType::i64)
    sum_in_rank_order<int64_t>(all.data(), n, count, 0, count, recv);
  else
    H3_ASSERT(false, "allreduce_sum on {}", dtype_name(dt));
}

void Comm::barrier(const std::string& what) {
  int32_t token = 0;
  std::vector<int32_t> all(size());
  allgatherv(&token, all.data(), std::vector<int64_t>(size(), 1), DType::i32, what);
}

}  // namespace h3

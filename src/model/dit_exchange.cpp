#include "model/dit_exchange.h"

#include <cstring>

#include "core/error.h"

namespace h3 {

HeadExchange::HeadExchange(Comm& comm, std::vector<Range> row_blocks, std::vector<Range> head_parts,
                           int64_t head_begin, int64_t head_dim, int chunks, std::string what)
    : comm_(comm), rows_(std::move(row_blocks)), heads_(std::move(head_parts)), h0_(head_begin), d_(head_dim),
      chunks_(std::max(1, chunks)), what_(std::move(what)) {
  H3_ASSERT(static_cast<int>(rows_.size()) == comm_.size() && static_cast<int>(heads_.size()) == comm_.size(),
            "{}: {} row blocks / {} head parts for {} ranks", what_, rows_.size(), heads_.size(), comm_.size());
}

namespace {
// Heads of chunk c of part p (absolute head indices).
Range chunk_heads(const Range& p, int chunks, int c) {
  Range r = part_of(p.size(), chunks, c);
  return {p.begin + r.begin, p.begin + r.end};
}
int64_t total_rows(const std::vector<Range>& rows) { return rows.back().end - rows.front().begin; }
}  // namespace

void HeadExchange::start_seq_to_head(const Tensor& x) {
  const int n = comm_.size(), me = comm_.rank();
  const DType dt = x.dtype();
  const size_t es = dtype_size(dt);
  const int64_t my_rows = rows_[me].size(), width = x.dim(1);
  H3_ASSERT(x.dim(0) == my_rows, "{}: {} rows, expected {}", what_, x.dim(0), my_rows);
  const auto* xp = static_cast<const std::byte*>(x.raw());
  send_.assign(chunks_, {});
  recv_.assign(chunks_, {});
  for (int c = 0; c < chunks_; ++c) {
    std::vector<int64_t> sc(n), rc(n);
    int64_t sbytes = 0, rbytes = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = my_rows * chunk_heads(heads_[j], chunks_, c).size() * d_;
      rc[j] = rows_[j].size() * chunk_heads(heads_[me], chunks_, c).size() * d_;
      sbytes += sc[j];
      rbytes += rc[j];
    }
    send_[c].resize(sbytes * es);
    recv_[c].resize(rbytes * es);
    std::byte* s = send_[c].data();
    for (int j = 0; j < n; ++j) {  // block for j: my rows x j's chunk heads
      const Range hc = chunk_heads(heads_[j], chunks_, c);
      const size_t w = hc.size() * d_ * es;
      for (int64_t r = 0; r < my_rows; ++r, s += w)
        std::memcpy(s, xp + (r * width + (hc.begin - h0_) * d_) * es, w);
    }
    pending_.push_back(comm_.ialltoallv(send_[c].data(), sc, recv_[c].data(), rc, dt, what_));
  }
  const int64_t out_rows = total_rows(rows_), out_cols = heads_[me].size() * d_;
  unpack_ = [this, dt, es, out_rows, out_cols, me, n]() {
    Tensor y(dt, {out_rows, out_cols});
    auto* yp = static_cast<std::byte*>(y.raw());
    for (int c = 0; c < chunks_; ++c) {
      const Range hc = chunk_heads(heads_[me], chunks_, c);
      const size_t w = hc.size() * d_ * es;
      const std::byte* r = recv_[c].data();
      for (int j = 0; j < n; ++j)
        for (int64_t row = rows_[j].begin; row < rows_[j].end; ++row, r += w)
          std::memcpy(yp + ((row - rows_.front().begin) * out_cols + (hc.begin - heads_[me].begin) * d_) * es, r, w);
    }
    return y;
  };
}

void HeadExchange::start_head_to_seq(const Tensor& y) {
  const int n = comm_.size(), me = comm_.rank();
  const DType dt = y.dtype();
  const size_t es = dtype_size(dt);
  const int64_t width = y.dim(1), my_rows = rows_[me].size();
  H3_ASSERT(y.dim(0) == total_rows(rows_) && width == heads_[me].size() * d_, "{}: got {}", what_, y.describe());
  const auto* yp = static_cast<const std::byte*>(y.raw());
  send_.assign(chunks_, {});
  recv_.assign(chunks_, {});
  for (int c = 0; c < chunks_; ++c) {
    const Range mine = chunk_heads(heads_[me], chunks_, c);
    std::vector<int64_t> sc(n), rc(n);
    int64_t sbytes = 0, rbytes = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = rows_[j].size() * mine.size() * d_;
      rc[j] = my_rows * chunk_heads(heads_[j], chunks_, c).size() * d_;
      sbytes += sc[j];
      rbytes += rc[j];
    }
    send_[c].resize(sbytes * es);
    recv_[c].resize(rbytes * es);
    std::byte* s = send_[c].data();
    const size_t w = mine.size() * d_ * es;
    for (int j = 0; j < n; ++j)  // block for j: j's rows x my chunk heads
      for (int64_t row = rows_[j].begin; row < rows_[j].end; ++row, s += w)
        std::memcpy(s, yp + ((row - rows_.front().begin) * width + (mine.begin - heads_[me].begin) * d_) * es, w);
    pending_.push_back(comm_.ialltoallv(send_[c].data(), sc, recv_[c].data(), rc, dt, what_));
  }
  int64_t full_cols = 0;
  for (const auto& h : heads_) full_cols += h.size() * d_;
  unpack_ = [this, dt, es, my_rows, full_cols, n]() {
    Tensor x(dt, {my_rows, full_cols});
    auto* xp = static_cast<std::byte*>(x.raw());
    for (int c = 0; c < chunks_; ++c) {
      const std::byte* r = recv_[c].data();
      for (int j = 0; j < n; ++j) {
        const Range hc = chunk_heads(heads_[j], chunks_, c);
        const size_t w = hc.size() * d_ * es;
        for (int64_t row = 0; row < my_rows; ++row, r += w)
          std::memcpy(xp + (row * full_cols + (hc.begin - h0_) * d_) * es, r, w);
      }
    }
    return x;
  };
}

Tensor HeadExchange::finish() {
  for (auto& p : pending_) p->wait();
  pending_.clear();
  Tensor out = unpack_();
  send_.clear();
  recv_.clear();
  return out;
}

}  // namespace h3

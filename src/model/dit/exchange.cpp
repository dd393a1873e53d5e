#include "model/dit/exchange.h"

#include <cstring>

#include "core/device.h"
#include "core/error.h"

namespace h3 {

HeadExchange::HeadExchange(Comm& comm, std::vector<Range> row_blocks, std::vector<Range> head_parts, int64_t head_begin,
                           int64_t head_dim, int chunks, std::string what)
    : comm_(comm),
      rows_(std::move(row_blocks)),
      heads_(std::move(head_parts)),
      h0_(head_begin),
      d_(head_dim),
      chunks_(std::max(1, chunks)),
      what_(std::move(what)) {
  H3_ASSERT(static_cast<int>(rows_.size()) == comm_.size() && static_cast<int>(heads_.size()) == comm_.size(),
            "{}: {} row blocks / {} head parts for {} ranks", what_, rows_.size(), heads_.size(), comm_.size());
}

namespace {
// Heads of chunk c of part p (absolute head indices).
Range chunk_heads(const Range& p, int chunks, int c) {
  Range r = part_of(p.size(), chunks, c);
  return {p.begin + r.begin, p.begin + r.end};
}
int64_t total_rows(const std::vector<Range>& rows) {
  return rows.back().end - rows.front().begin;
}

// `rows` rows of `width` bytes from a pitched source to a pitched destination, in host or device memory.
void copy_rows(std::byte* dst, size_t dst_pitch, const std::byte* src, size_t src_pitch, size_t width, int64_t rows,
               Device dev) {
  if (width == 0 || rows == 0) return;
  if (dev != Device::cpu) {
    device_hooks().copy2d(dst, dst_pitch, src, src_pitch, width, static_cast<size_t>(rows));
    return;
  }
  for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * dst_pitch, src + r * src_pitch, width);
}

Tensor byte_buffer(int64_t bytes, Device dev) {
  return Tensor(DType::u8, {std::max<int64_t>(bytes, 1)}, dev);
}
std::byte* bytes_of(const Tensor& t) {
  return static_cast<std::byte*>(t.raw());
}
}  // namespace

void HeadExchange::start_seq_to_head(const Tensor& x) {
  const int n = comm_.size(), me = comm_.rank();
  const DType dt = x.dtype();
  const size_t es = dtype_size(dt);
  const int64_t my_rows = rows_[me].size(), width = x.dim(1);
  H3_ASSERT(x.dim(0) == my_rows, "{}: {} rows, expected {}", what_, x.dim(0), my_rows);
  const Device dev = x.device();
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
    send_[c] = byte_buffer(sbytes * es, dev);
    recv_[c] = byte_buffer(rbytes * es, dev);
    std::byte* s = bytes_of(send_[c]);
    for (int j = 0; j < n; ++j) {  // block for j: my rows x j's chunk heads
      const Range hc = chunk_heads(heads_[j], chunks_, c);
      const size_t w = hc.size() * d_ * es;
      copy_rows(s, w, xp + (hc.begin - h0_) * d_ * es, width * es, w, my_rows, dev);
      s += my_rows * w;
    }
    pending_.push_back(comm_.ialltoallv(bytes_of(send_[c]), sc, bytes_of(recv_[c]), rc, dt, what_));
  }
  const int64_t out_rows = total_rows(rows_), out_cols = heads_[me].size() * d_;
  unpack_ = [this, dt, es, out_rows, out_cols, me, n, dev]() {
    Tensor y(dt, {out_rows, out_cols}, dev);
    auto* yp = static_cast<std::byte*>(y.raw());
    for (int c = 0; c < chunks_; ++c) {
      const Range hc = chunk_heads(heads_[me], chunks_, c);
      const size_t w = hc.size() * d_ * es;
      const std::byte* r = bytes_of(recv_[c]);
      for (int j = 0; j < n; ++j) {
        const int64_t rows = rows_[j].size();
        copy_rows(yp + ((rows_[j].begin - rows_.front().begin) * out_cols + (hc.begin - heads_[me].begin) * d_) * es,
                  out_cols * es, r, w, w, rows, dev);
        r += rows * w;
      }
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
  const Device dev = y.device();
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
    send_[c] = byte_buffer(sbytes * es, dev);
    recv_[c] = byte_buffer(rbytes * es, dev);
    std::byte* s = bytes_of(send_[c]);
    const size_t w = mine.size() * d_ * es;
    for (int j = 0; j < n; ++j) {  // block for j: j's rows x my chunk heads
      const int64_t rows = rows_[j].size();
      copy_rows(s, w, yp + ((rows_[j].begin - rows_.front().begin) * width + (mine.begin - heads_[me].begin) * d_) * es,
                width * es, w, rows, dev);
      s += rows * w;
    }
    pending_.push_back(comm_.ialltoallv(bytes_of(send_[c]), sc, bytes_of(recv_[c]), rc, dt, what_));
  }
  int64_t full_cols = 0;
  for (const auto& h : heads_) full_cols += h.size() * d_;
  unpack_ = [this, dt, es, my_rows, full_cols, n, dev]() {
    Tensor x(dt, {my_rows, full_cols}, dev);
    auto* xp = static_cast<std::byte*>(x.raw());
    for (int c = 0; c < chunks_; ++c) {
      const std::byte* r = bytes_of(recv_[c]);
      for (int j = 0; j < n; ++j) {
        const Range hc = chunk_heads(heads_[j], chunks_, c);
        const size_t w = hc.size() * d_ * es;
        copy_rows(xp + (hc.begin - h0_) * d_ * es, full_cols * es, r, w, w, my_rows, dev);
        r += my_rows * w;
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

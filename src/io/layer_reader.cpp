#include "io/layer_reader.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/parallel.h"

namespace h3 {

namespace {

// The unit of parallel reads within a chunk.
constexpr size_t kPieceBytes = size_t{4} << 20;

}  // namespace

void* StreamQueues::event() const {
  return host() ? nullptr : device_hooks().event_create();
}
void StreamQueues::record(void* e, Queue q) const {
  if (!host()) device_hooks().event_record_on(e, q);
}
void StreamQueues::wait(Queue q, void* e) const {
  if (!host()) device_hooks().queue_wait(q, e);
}
void StreamQueues::copy(Queue q, void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes) const {
  if (bytes == 0) return;
  if (host())
    std::memcpy(dst, src, bytes);
  else
    device_hooks().copy_on(q, dst, dst_dev, src, src_dev, bytes);
}
void StreamQueues::host_wait(void* e) const {
  if (!host() && e) device_hooks().event_wait(e);
}
void StreamQueues::release(void* e) const {
  if (!host() && e) device_hooks().event_release(e);
}
std::byte* StreamQueues::host_alloc(size_t bytes) const {
  bytes = std::max<size_t>(bytes, 1);
  return host() ? new std::byte[bytes] : static_cast<std::byte*>(device_hooks().pinned_alloc(bytes));
}
void StreamQueues::host_free(std::byte* p) const {
  if (!p) return;
  if (host())
    delete[] p;
  else
    device_hooks().pinned_release(p);
}

StagedReader::StagedReader(StreamQueues queues, size_t chunk_bytes) : q_(queues), chunk_bytes_(chunk_bytes) {
  H3_ASSERT(chunk_bytes_ > 0, "StagedReader: chunk_bytes 0");
  thread_ = std::thread([this] { run(); });
}

StagedReader::~StagedReader() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

uint64_t StagedReader::submit(StagedFill fill) {
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    ticket = ++submitted_;
    jobs_.emplace_back(ticket, std::move(fill));
  }
  cv_.notify_all();
  return ticket;
}

double StagedReader::wait(uint64_t ticket) {
  const auto t0 = std::chrono::steady_clock::now();
  std::unique_lock lock(mu_);
  cv_.wait(lock, [&] { return done_ >= ticket; });
  if (auto it = failed_.find(ticket); it != failed_.end()) {
    const std::exception_ptr e = it->second;
    failed_.erase(it);
    std::rethrow_exception(e);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void StagedReader::run() {
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stopping, and everything submitted ran
    auto [ticket, job] = std::move(jobs_.front());
    jobs_.pop_front();
    lock.unlock();
    std::exception_ptr error;
    try {
      fill(job);
    } catch (const std::exception& e) {
      error =
          std::make_exception_ptr(Error(job.what + ": streaming its weights from the checkpoint failed: " + e.what()));
    }
    lock.lock();
    if (error) failed_[ticket] = error;
    done_ = ticket;
    cv_.notify_all();
  }
}

void StagedReader::fill(const StagedFill& f) {
  q_.host_wait(f.copied);  // the slot's last fill read staging: done before it is overwritten
  q_.wait(Queue::transfer, f.freed);
  for (const MappedPart& part : *f.parts) {
    const size_t total = part.read.bytes();
    for (size_t from = 0; from < total; from += chunk_bytes_) {
      const size_t n = std::min(chunk_bytes_, total - from);
      std::byte* dst = f.staging + part.offset + from;
      const std::vector<ReadPiece> pieces = read_pieces(part.read, from, n, kPieceBytes);
      parallel_for(static_cast<int64_t>(pieces.size()), [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          part.read.file->read(part.read.key, pieces[i].src, dst + pieces[i].dst, pieces[i].bytes);
      });
      q_.copy(Queue::transfer, f.dst + part.offset + from, true, dst, false, n);
    }
  }
  q_.record(f.copied, Queue::transfer);
}

}  // namespace h3

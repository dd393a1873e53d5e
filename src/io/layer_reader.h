// The parts of the layer streamer (io/layer_stream.h) below its ring: a device's two queues or their host stand-ins,
// and the reader thread that fills slots from a checkpoint through page-locked staging buffers (the mapped source,
// for hosts whose memory cannot hold page-locked copies of the streamed layers).
#pragma once
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/device.h"
#include "core/tensor.h"
#include "io/device_loader.h"

namespace h3 {

// The queue operations of `device` through its hooks (core/device.h), or on Device::cpu their host stand-ins:
// copies happen at once, events are null and waits are no-ops. Host buffers are page-locked on a device.
struct StreamQueues {
  Device device = Device::cpu;
  bool host() const { return device == Device::cpu; }
  void* event() const;
  void record(void* e, Queue q) const;
  void wait(Queue q, void* e) const;
  void copy(Queue q, void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) const;
  void host_wait(void* e) const;
  void release(void* e) const;
  std::byte* host_alloc(size_t bytes) const;
  void host_free(std::byte* p) const;
};

// A part of a mapped layer: tensor bytes read from a file to `offset` of the layer's record.
struct MappedPart {
  TensorRead read;
  size_t offset = 0;
};

// One slot fill from files: wait (host) for the slot's previous fill, whose copies read `staging`, to complete
// (its `copied`); make the transfer queue wait for `freed` (the slot's last use); read each part into staging at its
// offset, chunk by chunk, queueing each chunk's copy to dst at the same offset once read; record `copied` on the
// transfer queue.
struct StagedFill {
  const std::vector<MappedPart>* parts = nullptr;
  std::byte* staging = nullptr;
  std::byte* dst = nullptr;  // on the device
  void* freed = nullptr;
  void* copied = nullptr;
  std::string what;  // "DiT layer 7", for errors
};

// Runs StagedFills in order on one thread. submit() returns a ticket; wait(ticket) returns once that fill's copies
// are queued (not completed: the device-side wait on `copied` orders the rest), and rethrows its failure.
class StagedReader {
 public:
  StagedReader(StreamQueues queues, size_t chunk_bytes);
  ~StagedReader();  // runs what was submitted, then stops
  StagedReader(const StagedReader&) = delete;
  StagedReader& operator=(const StagedReader&) = delete;
  uint64_t submit(StagedFill fill);
  // Host seconds spent waiting.
  double wait(uint64_t ticket);

 private:
  void run();
  void fill(const StagedFill& f);

  StreamQueues q_;
  size_t chunk_bytes_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::pair<uint64_t, StagedFill>> jobs_;
  std::map<uint64_t, std::exception_ptr> failed_;
  uint64_t submitted_ = 0, done_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace h3

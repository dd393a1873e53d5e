// Device memory behind the backend-neutral Tensor: core knows no CUDA, so a backend registers hooks for
// allocating, copying and converting device memory. Without a registered backend, asking for a device tensor
// fails with a message saying the build has no GPU backend.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace h3 {

enum class Device : uint8_t;

// A device's two queues: kernels and the copies that feed them run in order on `compute`; `transfer` carries
// host-to-device weight copies (io/layer_stream.h) beside it, so that a copy runs while the compute queue works.
// Work on different queues is ordered only by events: record an event at a point of one queue, make the other wait
// for it on the device (no host synchronisation).
enum class Queue : uint8_t { compute, transfer };

struct DeviceHooks {
  const char* name = "";                   // "cuda"
  void* (*alloc)(size_t bytes) = nullptr;  // never returns null (throws h3::Error)
  void (*release)(void* p, size_t bytes) = nullptr;
  // Copies bytes between host and device or within a device; returns when dst can be read.
  void (*copy)(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) = nullptr;
  void (*zero)(void* p, size_t bytes) = nullptr;
  // Device-to-device copy of `rows` rows of `width` bytes between pitched layouts (queued on the compute stream).
  void (*copy2d)(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t width, size_t rows) = nullptr;
  // Element-wise conversion of n values, both sides in device memory.
  void (*convert)(const void* src, DType st, void* dst, DType dt, int64_t n) = nullptr;
  // Timing marks on the compute stream (core/profile.h): an opaque recorded event, the milliseconds between two
  // (waits for the second), and its release.
  void* (*event_record)() = nullptr;
  double (*event_elapsed_ms)(void* from, void* to) = nullptr;
  void (*event_release)(void* e) = nullptr;
  // Staged transfers (io/device_loader.h, the streamed writers): page-locked host memory, a copy between it and
  // device memory queued on the compute stream without waiting (the host side must stay untouched until an event
  // recorded after the copy has completed), and the host's wait for such an event.
  void* (*pinned_alloc)(size_t bytes) = nullptr;  // never returns null (throws h3::Error)
  void (*pinned_release)(void* p) = nullptr;
  void (*copy_async)(void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) = nullptr;
  void (*event_wait)(void* e) = nullptr;
  // Two queues (Queue above), from any thread. An event made by event_create is reusable: event_record_on marks the
  // work queued on a queue so far (recording it again moves the mark), queue_wait makes the work queued on a queue
  // from now on start only after the event's last recording (at the time of the call) has completed: on the device,
  // the host does not wait; an event never recorded is no wait. event_wait (the host's wait) and event_release take
  // these events too; event_elapsed_ms does not (they keep no time). copy_on queues a copy on a queue without
  // waiting (host memory involved must be page-locked and stay untouched until an event recorded after it has
  // completed). event_done says whether the last recording has completed, without waiting.
  void* (*event_create)() = nullptr;
  void (*event_record_on)(void* e, Queue q) = nullptr;
  void (*queue_wait)(Queue q, void* e) = nullptr;
  void (*copy_on)(Queue q, void* dst, bool dst_on_device, const void* src, bool src_on_device, size_t bytes) = nullptr;
  bool (*event_done)(void* e) = nullptr;
};

void register_device_hooks(const DeviceHooks& hooks);
// The hooks of the compiled-in backend, or a clear error when a device tensor is asked for without one.
const DeviceHooks& device_hooks();
bool have_device_backend();

// Tests: `hooks` stand for the device until the scope ends, then what was registered before comes back (or none).
class ScopedDeviceHooks {
 public:
  explicit ScopedDeviceHooks(const DeviceHooks& hooks);
  ~ScopedDeviceHooks();
  ScopedDeviceHooks(const ScopedDeviceHooks&) = delete;
  ScopedDeviceHooks& operator=(const ScopedDeviceHooks&) = delete;

 private:
  DeviceHooks previous_;
  bool had_ = false;
};

}  // namespace h3

// Device memory behind the backend-neutral Tensor: core knows no CUDA, so a backend registers hooks for
// allocating, copying and converting device memory. Without a registered backend, asking for a device tensor
// fails with a message saying the build has no GPU backend.
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.h"

namespace h3 {

enum class Device : uint8_t;

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
};

void register_device_hooks(const DeviceHooks& hooks);
// The hooks of the compiled-in backend, or a clear error when a device tensor is asked for without one.
const DeviceHooks& device_hooks();
bool have_device_backend();

}  // namespace h3

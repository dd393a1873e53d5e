// Layer streaming: a model too large for its device keeps some layers resident (device tensors as always) and parks
// the others in host memory; each parked layer is copied into a ring of device slots ahead of the compute that needs
// it, on the device's transfer queue (core/device.h: Queue), ordered against the compute queue by events only, so
// the host never waits on the hot path and the copy of layer i+1 runs while layer i computes. The bytes in a slot are
// the bytes the device copy held and the model runs the same kernels on them: a streamed run is bitwise the
// resident one.
//
// Use (one streamer per model, e.g. the DiT's 50 blocks or the text tower's 50 layers):
//   load:  LayerStreamer s(device, "DiT", 50);
//          for each layer not resident (spread_resident):  s.park(i, {qkv, out, ff1, ff2, adaln, ...});
//          (or s.park_mapped(i, {...}) where host memory is short: choose_park_source)
//   run:   for each layer i of a forward: if (s.streamed(i)) { auto w = s.acquire(i); <queue layer i's kernels on
//          w, in park's order>; s.release(i); } else { <queue them on the resident tensors> }
//
// The event protocol (what makes it correct), per slot: `copied` on the transfer queue after a fill's copies, `freed`
// on the compute queue after the kernels of the slot's layer.
//   1. A fill of slot s queues, on the transfer queue: wait(freed_s), the copies into s, record(copied_s). freed_s
//      is first recorded when the slot is allocated (its memory may have served a tensor whose kernels are queued).
//   2. acquire(i) makes the compute queue wait(copied_s) for the slot s holding i (after, for a mapped layer, the host
//      waited until the reader thread had queued step 1), before any kernel of layer i is queued.
//   3. release(i), called once layer i's kernels are queued, records freed_s on the compute queue, then queues the
//      fill of s with the next streamed layer (step 1): it starts once those kernels are done.
//   Prefetch is cyclic over the streamed layers in ascending order: after the last one of a pass, the first one of
//   the next pass is copied at once, so the copy engine works through the output heads, the sampler and the next
//   prologue. With B slots, B - 1 fills are in flight while one layer computes. An acquire of a layer no slot holds
//   (out of order) fills a slot now (the one needed latest) and waits for it on the device; prefetching continues
//   after that layer.
// On Device::cpu the same class runs on host memory: slots are host buffers, copies happen at once, waits are no-ops.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/host_memory.h"
#include "core/tensor.h"
#include "io/device_loader.h"
#include "io/layer_reader.h"

namespace h3 {

// Which r of n layers stay resident, spread evenly so that each streamed layer's copy has the compute of the
// resident ones around it to hide behind (at 480p FP8 a DiT block computes in about the time its copy takes, so
// "the first r resident" would leave the copy engine no slack). Layer k is resident when it is one of
// floor((2j + 1) n / (2r)), j = 0..r-1: the middle of each of r equal parts (r = n/2: every odd layer). Result[k] is
// true for a resident layer; r is clamped to [0, n].
std::vector<bool> spread_resident(int n, int r);

// A tensor of a parked layer read from a checkpoint each time it is copied (the mapped source), instead of a
// page-locked copy: `read` holds its bytes exactly as the device tensor holds them (an FP8 checkpoint's e4m3 bytes,
// bf16 weights in bf16; its dtype and shape are the tensor's); `scale` is the fp8 scale on the streamer's device
// (undefined: none). A tensor the model stacks from stored parts (the text tower's [up; gate]) lists the parts after
// the first in `stacked`: the tensor is their rows in order, read.shape with the first dimension summed (same dtype
// and trailing dimensions). Its files must outlive the streamer: `owner` (optional) is kept until the streamer goes.
struct MappedTensor {
  TensorRead read;
  Tensor scale;
  std::vector<TensorRead> stacked = {};
  std::shared_ptr<const void> owner = {};
};

// Where the parked layers live: page-locked copies in host memory, or the checkpoint (mapped).
enum class ParkSource : uint8_t { pinned, mapped };
// Host memory left free beside page-locked copies: the rest of the process (the other models' host work, the MP4
// writer's frames) and the page cache the checkpoint reads go through.
inline constexpr int64_t kParkHostMarginBytes = int64_t{8} << 30;
std::string_view park_source_name(ParkSource s);  // "pinned", "mapped"
// Whether page-locked copies of park_bytes fit a host with `available` bytes: park_bytes + kParkHostMarginBytes <=
// available. The one test of the rule below, which the memory plan applies too (pipeline/memory_plan.cpp), so the
// plan and the loads choose alike.
bool pinned_copies_fit(int64_t park_bytes, int64_t available);
// The rule: pinned when pinned_copies_fit(park_bytes, host.available); else mapped when the layers can be read from
// their files as stored (`mappable`: stored bytes == device bytes) and the page-locked staging (staging_bytes: slots x
// the largest layer) fits with the margin; else a clear error naming the host memory the job needs.
ParkSource choose_park_source(const std::string& label, int64_t park_bytes, int64_t staging_bytes, bool mappable,
                              const HostMemory& host);
// The error for a model told to stream from its checkpoint (the plan found host memory short) whose stored bytes are
// not the device's: choose_park_source's message for an unmappable checkpoint, with `why` (which tensor and how it
// is stored) added. park_bytes: what page-locked copies would take instead.
[[noreturn]] void fail_unmappable(const std::string& label, int64_t park_bytes, const HostMemory& host,
                                  const std::string& why);

struct LayerStreamStats {
  int layers = 0, streamed = 0, slots = 0;
  size_t parked_bytes = 0;      // host: page-locked records of the pinned layers
  size_t mapped_bytes = 0;      // the mapped layers' bytes, read from files at each copy
  size_t staging_bytes = 0;     // host: page-locked staging of the mapped source (slots x the largest layer)
  size_t slot_bytes = 0;        // device: the ring (slots x the largest layer)
  size_t copied_bytes = 0;      // host -> device so far (fills queued)
  int64_t copies = 0;           // fills queued
  int64_t misses = 0;           // acquires whose layer no slot held (out of order)
  double reader_wait_s = 0;     // host seconds acquire waited for the reader thread to queue a mapped fill
  std::string summary() const;  // one line for the log
};

class LayerStreamer {
 public:
  struct Options {
    int slots = 3;                          // the ring: one layer in use, slots - 1 fills in flight
    size_t chunk_bytes = size_t{32} << 20;  // the mapped source's unit of read-then-copy
  };
  // Layers 0..layers-1 of the model `label` names in errors ("DiT", "text tower").
  LayerStreamer(Device device, std::string label, int layers);
  LayerStreamer(Device device, std::string label, int layers, const Options& options);
  // Host-waits for the queued copies, then frees the slots and the host memory.
  ~LayerStreamer();
  LayerStreamer(const LayerStreamer&) = delete;
  LayerStreamer& operator=(const LayerStreamer&) = delete;

  // Load time, before the first acquire. Parks `layer`: each tensor's bytes (on the streamer's device) go into one
  // page-locked host record (each at a 256-byte aligned offset; dtype, shape and the fp8 scale, which stays on the
  // device, remembered). The device memory goes back when the caller's last reference to the tensors goes: pass
  // them with std::move and keep none.
  void park(int layer, std::vector<Tensor> tensors);
  // The same from file spans (MappedTensor): nothing is read until a copy needs it.
  // Its tensors' bytes must be what the device tensor would hold (the caller checks; the reader copies bytes).
  void park_mapped(int layer, std::vector<MappedTensor> tensors);
  bool streamed(int layer) const;
  // Allocates the slots and queues the first fills now (the first acquire does it otherwise): call it after loading
  // to start the copies during the first prologue.
  void start();

  // Run time. The layer's tensors, in park's order, as views into the slot holding it (fp8 ones with their scales),
  // after making the compute queue wait for that slot's copy. Valid until release(layer): the slot is refilled then.
  std::vector<Tensor> acquire(int layer);
  // Once the layer's kernels are queued: frees its slot for the next copy (see the protocol above).
  void release(int layer);
  // Host-waits until every queued copy has completed (tests; the destructor does it).
  void wait_copies();
  // Between passes of a model that stays loaded (a server's DiT between requests, a kept text tower): host-waits the
  // queued copies and gives the ring back (its device slots and the mapped source's staging), so that outside its
  // phase the model holds its resident layers only, as the memory plan counts it (the ring is the phase's). The next
  // acquire (or start) allocates the ring again and fills it from the first streamed layer. No layer may be acquired.
  void stop();

  Device device() const { return q_device_; }
  const std::string& label() const { return label_; }
  LayerStreamStats stats() const;
  // The bytes one slot needs for these tensors (the record: 256-byte aligned offsets), for memory plans.
  static size_t record_bytes(const std::vector<Shape>& shapes, const std::vector<DType>& dtypes);

 private:
  struct Entry {
    DType dtype = DType::u8;
    Shape shape;
    size_t offset = 0;
    Tensor scale;
  };
  struct Layer {
    bool parked = false;
    ParkSource source = ParkSource::pinned;
    size_t bytes = 0;
    std::vector<Entry> entries;
    std::byte* host = nullptr;      // pinned: the record
    std::vector<MappedPart> parts;  // mapped: where its bytes come from
  };
  struct Slot {
    Tensor storage;  // u8 [slot bytes] on the device
    std::shared_ptr<const void> owner;
    std::byte* base = nullptr;
    int layer = -1;       // the layer it holds or is being filled with
    bool in_use = false;  // acquired, not released
    uint64_t ticket = 0;  // the reader's fill not yet waited for (0: none)
    void* copied = nullptr;
    void* freed = nullptr;
    std::byte* staging = nullptr;
  };
  Layer& check_layer(int layer, const char* what);
  Layer& begin_park(int layer);  // checks that `layer` may be parked now
  void end_park(int layer);
  int slot_of(int layer) const;
  int victim_for(int layer) const;
  void fill(Slot& s, int layer);
  void wait_queued(Slot& s);
  void drop_ring();  // the destructor's and stop's: the slots' events, staging and device memory go back
  std::string what(int layer) const;

  Device q_device_;
  std::string label_;
  Options opt_;
  std::vector<Layer> layers_;
  std::vector<int> order_;  // the streamed layers, ascending
  std::vector<Slot> slots_;
  size_t next_ = 0;  // the position in order_ of the next layer to prefetch
  bool started_ = false;
  size_t largest_ = 0;
  std::unique_ptr<StagedReader> reader_;
  std::vector<std::shared_ptr<const void>> owners_;  // the mapped layers' files (MappedTensor::owner)
  LayerStreamStats stats_;
};

}  // namespace h3

// The layer streamer (io/layer_stream.h): on the CPU backend it gives back exactly the parked bytes in park's order,
// in order and out of order, from page-locked records and from a mapped file; which layers stay resident
// (spread_resident); where parked layers live (choose_park_source). Then the event protocol on an emulated device
// whose two queues run deferred, in adversarial orders: a kernel that reads a slot before its copy landed, or a copy
// that overwrites a slot still read, is seen.
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/device.h"
#include "io/layer_stream.h"
#include "io/safetensors.h"
#include "support/error_of.h"
#include "support/scratch_dir.h"

using namespace h3;
using h3::test::error_of;

namespace {

constexpr int64_t GiB = int64_t{1} << 30;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Layer i's tensors: shapes and dtypes that differ per layer (the largest sets the slot size), contents from i.
std::vector<Tensor> layer_tensors(int i) {
  std::vector<float> a(static_cast<size_t>(3 + i) * 5);
  for (size_t k = 0; k < a.size(); ++k) a[k] = static_cast<float>(i * 1000 + static_cast<int>(k)) * 0.25f;
  std::vector<int64_t> b(static_cast<size_t>(7 + 2 * i));
  for (size_t k = 0; k < b.size(); ++k) b[k] = -(i * 100 + static_cast<int64_t>(k));
  std::vector<double> c(1, 1.0 / (i + 3));
  return {Tensor::from(a, {3 + i, 5}), Tensor::from(b, {static_cast<int64_t>(b.size())}), Tensor::from(c, {1})};
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

void expect_layer(const std::vector<Tensor>& got, int i) {
  const std::vector<Tensor> want = layer_tensors(i);
  ASSERT_EQ(got.size(), want.size()) << "layer " << i;
  for (size_t k = 0; k < want.size(); ++k) EXPECT_TRUE(same_bytes(got[k], want[k])) << "layer " << i << " tensor " << k;
}

// Parks layers `parked` of `n` (their tensors' own copies go: only the streamer's remain).
void park_all(LayerStreamer& s, const std::vector<int>& parked) {
  for (int i : parked) s.park(i, layer_tensors(i));
}

}  // namespace

TEST(LayerStream, InOrderPassesGiveBackTheParkedBytes) {
  LayerStreamer s(Device::cpu, "test model", 6, {.slots = 2});
  park_all(s, {0, 2, 3, 5});
  EXPECT_TRUE(s.streamed(2));
  EXPECT_FALSE(s.streamed(1));
  EXPECT_FALSE(s.streamed(6));
  for (int pass = 0; pass < 3; ++pass)
    for (int i : {0, 2, 3, 5}) {
      expect_layer(s.acquire(i), i);
      s.release(i);
    }
  const LayerStreamStats st = s.stats();
  EXPECT_EQ(st.layers, 6);
  EXPECT_EQ(st.streamed, 4);
  EXPECT_EQ(st.slots, 2);
  EXPECT_EQ(st.misses, 0) << "in-order passes are served by the cyclic prefetch";
  EXPECT_EQ(st.copies, 2 + 12);  // the first fills, then one prefetch per release (the last two for a 4th pass)
  const size_t largest = LayerStreamer::record_bytes({{8, 5}, {17}, {1}}, {DType::f32, DType::i64, DType::f64});
  EXPECT_EQ(st.slot_bytes, 2 * largest);
  EXPECT_FALSE(st.summary().empty());
}

TEST(LayerStream, OutOfOrderAcquiresFillASlotNow) {
  LayerStreamer s(Device::cpu, "test model", 8, {.slots = 3});
  park_all(s, {0, 1, 2, 3, 4, 5, 6, 7});
  for (int i : {6, 0, 7, 3, 3, 1, 5, 2, 4, 0}) {
    expect_layer(s.acquire(i), i);
    s.release(i);
  }
  EXPECT_GT(s.stats().misses, 0);
  // Two layers held at once (one slot left for the prefetch), released in the other order.
  std::vector<Tensor> a = s.acquire(2), b = s.acquire(5);
  expect_layer(a, 2);
  expect_layer(b, 5);
  s.release(5);
  s.release(2);
  // With more streamed layers than slots all held at once, the next acquire is refused, naming the fix.
  std::vector<Tensor> c = s.acquire(0), d = s.acquire(1), e = s.acquire(4);
  EXPECT_TRUE(has(error_of([&] { (void)s.acquire(7); }), "release one first or stream with more slots"));
  expect_layer(c, 0);
  expect_layer(d, 1);
  expect_layer(e, 4);
}

TEST(LayerStream, MisuseIsRefusedNamingTheLayer) {
  LayerStreamer s(Device::cpu, "test model", 3);
  s.park(1, layer_tensors(1));
  EXPECT_TRUE(has(error_of([&] { s.park(1, layer_tensors(1)); }), "test model layer 1: parked twice"));
  EXPECT_TRUE(has(error_of([&] { s.park(3, layer_tensors(3)); }), "it has layers 0..2"));
  EXPECT_TRUE(has(error_of([&] { (void)s.acquire(0); }), "test model layer 0: acquired but not streamed"));
  EXPECT_TRUE(has(error_of([&] { s.release(1); }), "released but not acquired"));
  (void)s.acquire(1);
  EXPECT_TRUE(has(error_of([&] { (void)s.acquire(1); }), "acquired twice"));
  s.release(1);
  EXPECT_TRUE(has(error_of([&] { s.park(2, layer_tensors(2)); }), "parked after streaming started"));
  EXPECT_TRUE(has(error_of([] { LayerStreamer bad(Device::cpu, "x", 2, {.slots = 0}); }), "at least 1 slot"));
  (void)s.acquire(1);
  EXPECT_TRUE(has(error_of([&] { s.stop(); }), "test model: its ring given back while test model layer 1 is acquired"));
  s.release(1);
  s.stop();
  expect_layer(s.acquire(1), 1);  // the next acquire takes the ring again
}

// The mapped source: the bytes come from the file at each copy, through the reader thread and staging buffers in
// chunks smaller than a tensor.
TEST(LayerStream, MappedLayersReadTheFileAtEachCopy) {
  h3::test::ScratchDir dir;
  std::vector<std::pair<std::string, Tensor>> stored;
  for (int i = 0; i < 4; ++i) {
    const std::vector<Tensor> t = layer_tensors(i);
    for (size_t k = 0; k < t.size(); ++k) stored.emplace_back(fmt::format("l{}.t{}", i, k), t[k]);
  }
  const std::string path = dir / "layers.safetensors";
  write_safetensors(path, stored);
  const SafeTensors f = SafeTensors::open(path);
  LayerStreamer s(Device::cpu, "mapped model", 4, {.slots = 2, .chunk_bytes = 256});
  s.park(0, layer_tensors(0));  // one pinned layer beside the mapped ones
  for (int i = 1; i < 4; ++i) {
    std::vector<MappedTensor> m;
    for (size_t k = 0; k < 3; ++k) m.push_back({read_tensor(f, fmt::format("l{}.t{}", i, k)), Tensor()});
    s.park_mapped(i, std::move(m));
  }
  for (int i : {0, 1, 2, 3, 0, 1, 3, 2, 1}) {
    expect_layer(s.acquire(i), i);
    s.release(i);
  }
  const LayerStreamStats st = s.stats();
  EXPECT_GT(st.mapped_bytes, 0u);
  EXPECT_GT(st.staging_bytes, 0u);
  EXPECT_EQ(st.parked_bytes, LayerStreamer::record_bytes({{3, 5}, {7}, {1}}, {DType::f32, DType::i64, DType::f64}));
}

// A tensor stacked from two stored tensors (the text tower's [up; gate]) is one tensor in the slot, their rows in
// order, and the streamer keeps the file open after its opener let go (MappedTensor::owner).
TEST(LayerStream, StackedReadsMakeOneTensorAndTheFileStaysOpen) {
  h3::test::ScratchDir dir;
  const std::vector<float> up{1, 2, 3, 4, 5, 6}, gate{-1, -2, -3, -4, -5, -6, -7, -8, -9};
  const std::string path = dir / "parts.safetensors";
  write_safetensors(path, {{"up", Tensor::from(up, {2, 3})}, {"gate", Tensor::from(gate, {3, 3})}});
  auto f = std::make_shared<SafeTensors>(SafeTensors::open(path));
  LayerStreamer s(Device::cpu, "stacked", 1, {.slots = 1, .chunk_bytes = 256});
  std::vector<MappedTensor> m;
  m.push_back({read_tensor(*f, "up"), Tensor(), {read_tensor(*f, "gate")}, f});
  s.park_mapped(0, std::move(m));
  f.reset();
  const std::vector<Tensor> got = s.acquire(0);
  ASSERT_EQ(got.size(), 1u);
  std::vector<float> want = up;
  want.insert(want.end(), gate.begin(), gate.end());
  EXPECT_TRUE(same_bytes(got[0], Tensor::from(want, {5, 3})));
  s.release(0);
  // Parts that cannot stand one under the other are refused.
  auto g = std::make_shared<SafeTensors>(SafeTensors::open(path));
  LayerStreamer bad(Device::cpu, "stacked", 1);
  std::vector<MappedTensor> b;
  b.push_back({read_rows(*g, "up", {{0, 2}}, {0, 2}), Tensor(), {read_tensor(*g, "gate")}, g});
  EXPECT_TRUE(has(error_of([&] { bad.park_mapped(0, std::move(b)); }), "cannot be stacked under 'up'"));
}

TEST(LayerStream, SpreadResidentPicksTheMiddleOfEachPart) {
  auto picked = [](int n, int r) {
    std::vector<int> out;
    const std::vector<bool> v = spread_resident(n, r);
    EXPECT_EQ(v.size(), static_cast<size_t>(std::max(n, 0)));
    for (size_t i = 0; i < v.size(); ++i)
      if (v[i]) out.push_back(static_cast<int>(i));
    return out;
  };
  EXPECT_EQ(picked(4, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(picked(5, 2), (std::vector<int>{1, 3}));
  EXPECT_EQ(picked(5, 1), (std::vector<int>{2}));
  EXPECT_EQ(picked(6, 3), (std::vector<int>{1, 3, 5}));
  EXPECT_EQ(picked(10, 3), (std::vector<int>{1, 5, 8}));
  EXPECT_EQ(picked(48, 4), (std::vector<int>{6, 18, 30, 42}));
  EXPECT_EQ(picked(3, 3), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(picked(3, 7), (std::vector<int>{0, 1, 2}));  // clamped
  EXPECT_EQ(picked(5, 0), (std::vector<int>{}));
  EXPECT_EQ(picked(5, -2), (std::vector<int>{}));
  EXPECT_EQ(picked(0, 2), (std::vector<int>{}));
}

TEST(LayerStream, ParkSourceRuleAndItsErrors) {
  const HostMemory host{64 * GiB, 40 * GiB};
  // Page-locked copies while they fit with the margin (8 GiB) beside them.
  EXPECT_EQ(choose_park_source("DiT", 32 * GiB, GiB, true, host), ParkSource::pinned);
  EXPECT_EQ(choose_park_source("DiT", 32 * GiB, GiB, false, host), ParkSource::pinned);
  // Else the mapped checkpoint, when its bytes are the device's and the staging fits.
  EXPECT_EQ(choose_park_source("DiT", 33 * GiB, GiB, true, host), ParkSource::mapped);
  EXPECT_EQ(choose_park_source("DiT", 33 * GiB, 32 * GiB, true, host), ParkSource::mapped);
  const std::string unmappable = error_of([&] { (void)choose_park_source("DiT", 33 * GiB, GiB, false, host); });
  EXPECT_TRUE(has(unmappable,
                  "DiT: streaming its layers needs 33.00 GiB of page-locked host memory (and 8.00 GiB "
                  "left free beside it), but only 40.00 GiB of this host's 64.00 GiB are available"))
      << unmappable;
  EXPECT_TRUE(has(unmappable, "h3 convert --quant fp8")) << unmappable;
  const std::string staging = error_of([&] { (void)choose_park_source("text tower", 33 * GiB, 33 * GiB, true, host); });
  EXPECT_TRUE(has(staging,
                  "text tower: streaming its layers from the checkpoint needs 33.00 GiB of page-locked "
                  "staging buffers"))
      << staging;
  EXPECT_TRUE(has(staging, "keep more layers on the GPU")) << staging;
  // The rule's one test, which the memory plan applies too.
  EXPECT_TRUE(pinned_copies_fit(32 * GiB, 40 * GiB));
  EXPECT_FALSE(pinned_copies_fit(32 * GiB + 1, 40 * GiB));
  // A model told to stream from a file whose bytes are not its own says which tensor.
  const std::string told = error_of([&] { fail_unmappable("DiT", 33 * GiB, host, "'w' is stored bf16"); });
  EXPECT_TRUE(has(told, "cannot be read as the device holds it: 'w' is stored bf16 (an FP8 run")) << told;
}

// ---- The event protocol on an emulated device ----

namespace {

// Two queues whose work runs later than it is queued, in an order the policy picks among what the events allow.
// Kernels are test callbacks queued on the compute queue; copies and waits are the streamer's.
struct FakeDevice {
  enum class Policy { transfer_first, compute_first, random };
  struct Event {
    int queue = -1;  // never recorded
    int64_t at = 0;  // complete once that many ops of the queue ran
  };
  struct Op {
    std::function<void()> run;
    int wait_queue = -1;
    int64_t wait_at = 0;
  };
  std::deque<Op> queue[2];
  int64_t queued[2] = {0, 0}, ran[2] = {0, 0};
  Policy policy = Policy::transfer_first;
  std::mt19937 rng{1};
  bool ignore_waits = false;  // the negative control: a device that drops the waits
  int host_waits = 0, copies = 0, pinned_live = 0, device_live = 0;

  static FakeDevice& get() {
    static FakeDevice d;
    return d;
  }
  void reset(Policy p, uint32_t seed) {
    queue[0].clear(), queue[1].clear();
    queued[0] = queued[1] = ran[0] = ran[1] = 0;
    policy = p;
    rng.seed(seed);
    ignore_waits = false;
    host_waits = copies = 0;
  }
  void push(int q, Op op) {
    queue[q].push_back(std::move(op));
    ++queued[q];
  }
  bool runnable(int q) const {
    if (queue[q].empty()) return false;
    const Op& op = queue[q].front();
    return op.wait_queue < 0 || ran[op.wait_queue] >= op.wait_at;
  }
  void run_one(int q) {
    Op op = std::move(queue[q].front());
    queue[q].pop_front();
    if (op.run) op.run();
    ++ran[q];
  }
  // Runs some of the runnable work, as the policy prefers: the other queue only when the preferred one is blocked
  // (transfer_first, compute_first), or a random amount of random picks.
  void advance() {
    for (int steps = 0; steps < 1000; ++steps) {
      const int t = static_cast<int>(Queue::transfer), c = static_cast<int>(Queue::compute);
      int pick = -1;
      if (policy == Policy::transfer_first) pick = runnable(t) ? t : -1;
      if (policy == Policy::compute_first) pick = runnable(c) ? c : -1;
      if (policy == Policy::random) {
        if (rng() % 3 == 0) return;
        const int first = static_cast<int>(rng() % 2);
        pick = runnable(first) ? first : runnable(1 - first) ? 1 - first : -1;
      }
      if (pick < 0) return;
      run_one(pick);
    }
  }
  // Runs work until `done` holds; fails on a deadlock (neither queue can move).
  void run_until(const std::function<bool()>& done) {
    while (!done()) {
      const int c = static_cast<int>(Queue::compute);
      const int pick = runnable(c) ? c : runnable(1 - c) ? 1 - c : -1;
      if (pick < 0) {
        ADD_FAILURE() << "emulated device deadlocked: " << queue[0].size() << " + " << queue[1].size()
                      << " ops blocked";
        return;
      }
      run_one(pick);
    }
  }
  void drain() {
    run_until([&] { return queue[0].empty() && queue[1].empty(); });
  }

  static DeviceHooks hooks() {
    DeviceHooks h;
    h.name = "fake";
    h.alloc = [](size_t bytes) -> void* {
      ++get().device_live;
      return new std::byte[std::max<size_t>(bytes, 1)];
    };
    h.release = [](void* p, size_t) {
      --get().device_live;
      delete[] static_cast<std::byte*>(p);
    };
    h.copy = [](void* dst, bool, const void* src, bool, size_t bytes) {  // returns when dst can be read
      get().drain();
      std::memcpy(dst, src, bytes);
    };
    h.zero = [](void* p, size_t bytes) {
      get().drain();
      std::memset(p, 0, bytes);
    };
    h.pinned_alloc = [](size_t bytes) -> void* {
      ++get().pinned_live;
      return new std::byte[bytes];
    };
    h.pinned_release = [](void* p) {
      --get().pinned_live;
      delete[] static_cast<std::byte*>(p);
    };
    h.event_create = []() -> void* { return new Event; };
    h.event_release = [](void* e) { delete static_cast<Event*>(e); };
    h.event_record_on = [](void* e, Queue q) {
      FakeDevice& d = get();
      *static_cast<Event*>(e) = {static_cast<int>(q), d.queued[static_cast<int>(q)]};
      d.advance();
    };
    h.queue_wait = [](Queue q, void* e) {
      FakeDevice& d = get();
      const Event ev = *static_cast<Event*>(e);  // its recording at the time of the call
      d.push(static_cast<int>(q), {nullptr, d.ignore_waits ? -1 : ev.queue, ev.at});
      d.advance();
    };
    h.copy_on = [](Queue q, void* dst, bool, const void* src, bool, size_t bytes) {
      FakeDevice& d = get();
      ++d.copies;
      d.push(static_cast<int>(q), {[=] { std::memcpy(dst, src, bytes); }});
      d.advance();
    };
    h.event_wait = [](void* e) {
      FakeDevice& d = get();
      ++d.host_waits;
      const Event ev = *static_cast<Event*>(e);
      if (ev.queue >= 0) d.run_until([&] { return d.ran[ev.queue] >= ev.at; });
    };
    h.event_done = [](void* e) {
      const Event ev = *static_cast<Event*>(e);
      return ev.queue < 0 || get().ran[ev.queue] >= ev.at;
    };
    return h;
  }
};

// Streams `passes` in-order passes and some out-of-order acquires of 7 layers (2 resident) through 3 slots on the
// emulated device; each layer's "kernel" runs deferred on the compute queue and compares the slot's bytes with the
// layer's. `stop`: the ring goes back after each in-order pass (a kept model between requests) and the device holds
// nothing of it once the queued kernels ran. Returns the number of kernels that saw wrong bytes.
int stream_on_fake_device(FakeDevice::Policy policy, uint32_t seed, bool ignore_waits, bool stop = false) {
  FakeDevice& dev = FakeDevice::get();
  dev.reset(policy, seed);
  int wrong = 0;
  {
    LayerStreamer s(Device::cuda, "fake model", 7, {.slots = 3});
    const std::vector<int> streamed = {0, 2, 3, 4, 6};
    for (int i : streamed) {
      std::vector<Tensor> on_device;
      for (const Tensor& t : layer_tensors(i)) on_device.push_back(t.to_device(Device::cuda));
      s.park(i, std::move(on_device));
    }
    dev.drain();
    dev.ignore_waits = ignore_waits;
    const int host_waits_before = dev.host_waits;
    std::vector<int> order;
    for (int pass = 0; pass < 3; ++pass) order.insert(order.end(), streamed.begin(), streamed.end());
    for (int i : {4, 0, 6, 6, 2}) order.push_back(i);
    int stop_waits = 0;
    for (size_t n = 0; n < order.size(); ++n) {
      const int i = order[n];
      if (stop && n > 0 && n % streamed.size() == 0 && n <= 3 * streamed.size()) {
        const int before = dev.host_waits;
        s.stop();
        stop_waits += dev.host_waits - before;
        dev.drain();
        EXPECT_EQ(dev.device_live, 0) << "the ring's slots stayed on the device after stop";
      }
      std::vector<Tensor> w = s.acquire(i);
      dev.push(static_cast<int>(Queue::compute), {[w, i, &wrong] {
                 const std::vector<Tensor> want = layer_tensors(i);
                 for (size_t k = 0; k < want.size(); ++k)
                   if (std::memcmp(w[k].raw(), want[k].raw(), want[k].nbytes()) != 0) ++wrong;
               }});
      s.release(i);
      dev.advance();
    }
    EXPECT_EQ(dev.host_waits - stop_waits, host_waits_before) << "the host waited on the hot path";
    dev.drain();
  }
  EXPECT_EQ(dev.pinned_live, 0) << "page-locked memory left behind";
  return wrong;
}

}  // namespace

TEST(LayerStream, EventProtocolHoldsOnADeferredDevice) {
  const ScopedDeviceHooks fake(FakeDevice::hooks());
  using P = FakeDevice::Policy;
  EXPECT_EQ(stream_on_fake_device(P::transfer_first, 0, false), 0) << "copies ran ahead into slots still read";
  EXPECT_EQ(stream_on_fake_device(P::compute_first, 0, false), 0) << "kernels read slots before their copy";
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    EXPECT_EQ(stream_on_fake_device(P::random, seed, false), 0) << "seed " << seed;
    EXPECT_EQ(stream_on_fake_device(P::random, seed, false, true), 0) << "seed " << seed << ", ring stopped";
  }
  EXPECT_EQ(stream_on_fake_device(P::transfer_first, 0, false, true), 0);
  EXPECT_EQ(stream_on_fake_device(P::compute_first, 0, false, true), 0);
  // The check can fail: without the waits, eager copies overwrite slots before their kernels read them, and eager
  // kernels read slots before the copies land.
  EXPECT_GT(stream_on_fake_device(P::transfer_first, 0, true), 0);
  EXPECT_GT(stream_on_fake_device(P::compute_first, 0, true), 0);
}

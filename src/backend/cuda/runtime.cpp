// The CUDA backend's process state: the chosen GPU, the compute stream and the transfer stream (core/device.h:
// Queue), a caching allocator held under the process's memory budget (backend/budget.h) and the hooks that let
// core tensors live in device memory.
#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <mutex>
#include <utility>

#include "backend/backend.h"
#include "backend/block_pool.h"
#include "backend/budget.h"
#include "backend/cuda/common.h"
#include "backend/cuda/convert.h"
#include "backend/cuda/gemm.h"
#include "backend/cuda/tensors.h"
#include "backend/gemm_algos_file.h"
#include "backend/pinned_pool.h"
#include "core/byte_size.h"
#include "core/device.h"
#include "core/log.h"
#include "core/profile.h"
#include "core/tensor.h"

namespace h3 {
namespace cuda {
void register_ops();  // backend/cuda/ops.cpp

namespace {

struct State {
  bool started = false;
  Numerics numerics;
  bool gemm_tune = true;
  int device = 0;
  int sms = 0;
  cudaStream_t stream = nullptr;
  // Host-to-device weight copies beside the compute stream. It writes only into memory its user keeps for as long
  // as copies into it may be queued (the layer streamer's slots, freed after a host wait for their last copy), so
  // the compute stream alone orders the caching allocator's reuse.
  cudaStream_t transfer = nullptr;
  cudaDeviceProp prop{};
  // The caching allocator (backend/block_pool.h): segments from cudaMalloc, split and merged, never more than
  // budget.cap together; the compute stream orders all reuse. `mu` guards the budget.
  std::mutex mu;
  std::unique_ptr<BlockPool> pool;
  GpuBudget budget;
  void* ws = nullptr;
  size_t ws_bytes = 0;
};
State& state() {
  static State s;
  return s;
}

// cudaMalloc for the pool: null when the device has no room (the pool gives its free segments back and asks again).
void* raw_alloc(size_t bytes) {
  profile::HostRegion region("cuda.malloc");  // a pool miss: cudaMalloc (and cudaFree of free segments at the cap)
  void* p = nullptr;
  const cudaError_t e = cudaMalloc(&p, bytes);
  if (e == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  H3_CUDA(e);
  return p;
}
// cudaFree waits for the device's queued work, so no kernel still reads what it gives back.
void raw_free(void* p) {
  if (cudaFree(p) != cudaSuccess) (void)cudaGetLastError();  // a broken device: the next checked call reports it
}

void* hook_alloc(size_t bytes) {
  return device_alloc(bytes);
}
void hook_release(void* p, size_t bytes) {
  device_free(p, bytes);
}

void hook_copy(void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes) {
  const cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                      : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  if (dst_dev && src_dev) {
    H3_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream()));
    return;
  }
  profile::HostRegion region("cuda.host_copy");  // waits for the stream: the copy and all work queued before it
  H3_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream()));
  H3_CUDA(cudaStreamSynchronize(stream()));
}

void* hook_event_record() {
  cudaEvent_t e = nullptr;
  H3_CUDA(cudaEventCreate(&e));
  H3_CUDA(cudaEventRecord(e, stream()));
  return e;
}
double hook_event_elapsed_ms(void* from, void* to) {
  H3_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(to)));
  float ms = 0;
  H3_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(from), static_cast<cudaEvent_t>(to)));
  return ms;
}
void hook_event_release(void* e) {
  cudaEventDestroy(static_cast<cudaEvent_t>(e));
}
void hook_event_wait(void* e) {
  H3_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(e)));
}

// The two queues from any thread: a thread that has not used this process's GPU yet selects it first (the runtime's
// current device is per thread; ranks sharing a host use GPUs other than 0).
void bind_thread() {
  thread_local int bound = -1;
  if (bound != state().device) {
    H3_CUDA(cudaSetDevice(state().device));
    bound = state().device;
  }
}
void* raw_pinned_alloc(size_t bytes) {
  void* p = nullptr;
  const cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocDefault);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    fail("cannot allocate {:.1f} MiB of page-locked host memory for staged copies: {} (host memory short?)",
         bytes / 1048576.0, cudaGetErrorString(e));
  }
  return p;
}
// Page-locked blocks are kept between the models of a request (backend/pinned_pool.h says why and how); never
// destroyed, so no cudaFreeHost runs after the runtime's own teardown at exit.
PinnedPool& pinned_pool() {
  static PinnedPool* pool = new PinnedPool(raw_pinned_alloc, [](void* p) { cudaFreeHost(p); });
  return *pool;
}
void* hook_pinned_alloc(size_t bytes) {
  return pinned_pool().take(bytes);
}
// cudaFreeHost waited for the device; a kept block must not be handed out again while a queued copy still uses it,
// so the release waits the same way (its users have already waited for their own copies: cheap). Called from
// destructors: a failing device is left for the next checked call to report, as cudaFreeHost's errors were.
void hook_pinned_release(void* p) {
  (void)cudaSetDevice(state().device);
  if (cudaDeviceSynchronize() != cudaSuccess) (void)cudaGetLastError();
  pinned_pool().give(p);
}
// Queued on the compute stream: later kernels (the conversions of what was copied) are ordered after it, and the
// caching allocator's stream-ordered reuse covers the device side.
void hook_copy_async(void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes) {
  const cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                      : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  H3_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, stream()));
}

cudaStream_t queue_stream(Queue q) {
  return q == Queue::transfer ? state().transfer : state().stream;
}
void* hook_event_create() {
  bind_thread();
  cudaEvent_t e = nullptr;
  H3_CUDA(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}
void hook_event_record_on(void* e, Queue q) {
  bind_thread();
  H3_CUDA(cudaEventRecord(static_cast<cudaEvent_t>(e), queue_stream(q)));
}
void hook_queue_wait(Queue q, void* e) {
  bind_thread();
  H3_CUDA(cudaStreamWaitEvent(queue_stream(q), static_cast<cudaEvent_t>(e), 0));
}
void hook_copy_on(Queue q, void* dst, bool dst_dev, const void* src, bool src_dev, size_t bytes) {
  bind_thread();
  const cudaMemcpyKind kind = dst_dev ? (src_dev ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
                                      : (src_dev ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
  H3_CUDA(cudaMemcpyAsync(dst, src, bytes, kind, queue_stream(q)));
}
bool hook_event_done(void* e) {
  const cudaError_t r = cudaEventQuery(static_cast<cudaEvent_t>(e));
  if (r == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is an answer, not an error to leave behind
    return false;
  }
  H3_CUDA(r);
  return true;
}

void hook_zero(void* p, size_t bytes) {
  H3_CUDA(cudaMemsetAsync(p, 0, bytes, stream()));
}

void hook_copy2d(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  H3_CUDA(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDeviceToDevice, stream()));
}

void hook_convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  H3_CUDA(cuda::convert(src, elem_type(st), dst, elem_type(dt), n, stream()));
}

}  // namespace

void throw_cuda(cudaError_t e, const char* what, const char* file, int line) {
  fail("CUDA error '{}' ({}) in {} at {}:{}", cudaGetErrorString(e), static_cast<int>(e), what, file, line);
}

ElemType elem_type(DType t) {
  // The tensor types the kernels take, and their names there.
  static constexpr std::pair<DType, ElemType> kTypes[] = {
      {DType::f32, ElemType::f32},           {DType::bf16, ElemType::bf16}, {DType::f64, ElemType::f64},
      {DType::fp8_e4m3, ElemType::fp8_e4m3}, {DType::i32, ElemType::i32},   {DType::i64, ElemType::i64}};
  for (const auto& [dtype, elem] : kTypes)
    if (dtype == t) return elem;
  fail("the CUDA backend has no {} tensors (f64, f32, bf16, fp8_e4m3, i32, i64 only)", dtype_name(t));
}

Tensor on_gpu(const Tensor& t, DType dt) {
  Tensor d = t.to_device(Device::cuda);
  return d.dtype() == dt ? d : d.to(dt);
}

cudaStream_t stream() {
  return state().stream;
}
bool deterministic() {
  return state().numerics.deterministic;
}
const Numerics& numerics() {
  return state().numerics;
}
bool gemm_tune() {
  return state().gemm_tune;
}

void* device_alloc(size_t bytes) {
  State& s = state();
  BlockPool::Refusal why = BlockPool::Refusal::none;
  void* p = s.pool->alloc(bytes, &why);
  if (p != nullptr) return p;
  const BlockPoolState now = s.pool->state();
  std::lock_guard lock(s.mu);
  if (why == BlockPool::Refusal::over_cap) fail_over_budget(s.budget, static_cast<int64_t>(bytes), now.in_use);
  if (why == BlockPool::Refusal::fragmented)
    fail_budget_fragmented(s.budget, static_cast<int64_t>(bytes), now.in_use, now.largest_free);
  size_t free_b = 0, total_b = 0;
  cudaMemGetInfo(&free_b, &total_b);
  fail(
      "GPU out of memory: asked for {:.2f} GiB with {:.2f} GiB in use by h3 and {:.2f} of {:.2f} GiB free on the "
      "device; use a smaller size, FP8, or more ranks (--ranks N --mode tensor shards the weights)",
      bytes / 1073741824.0, now.in_use / 1073741824.0, free_b / 1073741824.0, total_b / 1073741824.0);
}

void device_free(void* p, size_t) {
  state().pool->free(p);
}

void* workspace(size_t bytes) {
  State& s = state();
  if (bytes > s.ws_bytes) {
    if (s.ws) device_free(s.ws, s.ws_bytes);
    s.ws_bytes = bytes;
    s.ws = device_alloc(s.ws_bytes);
  }
  return s.ws;
}

}  // namespace cuda

void start_gpu_backend(const GpuOptions& o) {
  cuda::State& s = cuda::state();
  if (s.started) return;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    fail(
        "--device cuda: no usable NVIDIA GPU ({}); check nvidia-smi and CUDA_VISIBLE_DEVICES, or run with "
        "--device cpu",
        e == cudaSuccess ? "none visible" : cudaGetErrorString(e));
  // Ranks of one host take the GPUs in turn (the launcher's local rank when it gives one).
  s.device = (o.local_rank >= 0 ? o.local_rank : o.rank) % count;
  H3_CUDA(cudaSetDevice(s.device));
  H3_CUDA(cudaGetDeviceProperties(&s.prop, s.device));
  s.sms = s.prop.multiProcessorCount;
  H3_CUDA(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
  H3_CUDA(cudaStreamCreateWithFlags(&s.transfer, cudaStreamNonBlocking));
  // The budget from what is free now that the context and streams exist (library handles come lazily, inside the
  // allowance: backend/budget.h).
  size_t free_b = 0, total_b = 0;
  H3_CUDA(cudaMemGetInfo(&free_b, &total_b));
  s.budget = plan_gpu_budget(o.max_device_bytes, static_cast<int64_t>(free_b), static_cast<int64_t>(total_b));
  s.pool = std::make_unique<BlockPool>(cuda::raw_alloc, cuda::raw_free, std::max<int64_t>(s.budget.cap, 0));
  s.numerics = o.numerics;
  s.gemm_tune = o.gemm_tune;
  cuda::open_gemm_algo_cache(gemm_algos_file(o.gemm_algos, o.gemm_algos_dir, s.prop.name), s.prop.name);
  DeviceHooks hooks;
  hooks.name = "cuda";
  hooks.alloc = cuda::hook_alloc;
  hooks.release = cuda::hook_release;
  hooks.copy = cuda::hook_copy;
  hooks.zero = cuda::hook_zero;
  hooks.copy2d = cuda::hook_copy2d;
  hooks.convert = cuda::hook_convert;
  hooks.event_record = cuda::hook_event_record;
  hooks.event_elapsed_ms = cuda::hook_event_elapsed_ms;
  hooks.event_release = cuda::hook_event_release;
  hooks.pinned_alloc = cuda::hook_pinned_alloc;
  hooks.pinned_release = cuda::hook_pinned_release;
  hooks.copy_async = cuda::hook_copy_async;
  hooks.event_wait = cuda::hook_event_wait;
  hooks.event_create = cuda::hook_event_create;
  hooks.event_record_on = cuda::hook_event_record_on;
  hooks.queue_wait = cuda::hook_queue_wait;
  hooks.copy_on = cuda::hook_copy_on;
  hooks.event_done = cuda::hook_event_done;
  register_device_hooks(hooks);
  cuda::register_ops();
  s.started = true;
  spdlog::info("GPU {}: {}{}", s.device, gpu_description(), o.numerics.deterministic ? " (deterministic mode)" : "");
  spdlog::info("GPU memory budget {} ({}); h3's tensors may take {}", format_byte_size(s.budget.budget),
               s.budget.origin, format_byte_size(s.budget.cap));
}

int gpu_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

bool gpu_backend_started() {
  return cuda::state().started;
}
Numerics gpu_numerics() {
  return cuda::state().numerics;
}
void set_gpu_numerics(const Numerics& numerics) {
  cuda::state().numerics = numerics;
}

std::string gpu_description() {
  const cuda::State& s = cuda::state();
  if (!s.started) return "GPU backend not started";
  return fmt::format("{}, {:.1f} GiB, sm_{}{}, {} SMs", s.prop.name, s.prop.totalGlobalMem / 1073741824.0, s.prop.major,
                     s.prop.minor, s.sms);
}

std::string gpu_bus_id() {
  const cuda::State& s = cuda::state();
  if (!s.started) return "";
  char bus[64] = {0};
  H3_CUDA(cudaDeviceGetPCIBusId(bus, sizeof(bus), s.device));
  return bus;
}

void gpu_synchronize() {
  if (!cuda::state().started) return;
  H3_CUDA(cudaStreamSynchronize(cuda::stream()));
  H3_CUDA(cudaStreamSynchronize(cuda::state().transfer));
}

size_t gpu_peak_bytes() {
  return cuda::state().pool ? static_cast<size_t>(cuda::state().pool->state().peak) : 0;
}
void gpu_reset_peak() {
  if (cuda::state().pool) cuda::state().pool->reset_peak();
}
size_t gpu_in_use_bytes() {
  return cuda::state().pool ? static_cast<size_t>(cuda::state().pool->state().in_use) : 0;
}
size_t gpu_total_bytes() {
  return cuda::state().started ? cuda::state().prop.totalGlobalMem : 0;
}
int64_t gpu_budget_bytes() {
  cuda::State& s = cuda::state();
  if (!s.started) return 0;
  std::lock_guard lock(s.mu);
  return s.budget.cap;
}
void set_gpu_budget_bytes(int64_t cap, const std::string& why) {
  cuda::State& s = cuda::state();
  if (!s.started) return;
  std::lock_guard lock(s.mu);
  s.budget = lower_gpu_budget(s.budget, cap, why);
  s.pool->set_cap(std::max<int64_t>(s.budget.cap, 0));
  spdlog::info("GPU memory budget {}: h3's tensors may take {}", s.budget.describe(), format_byte_size(s.budget.cap));
}
int64_t gpu_free_at_start_bytes() {
  return cuda::state().started ? cuda::state().budget.free_at_start : 0;
}

void gpu_release_cached() {
  cuda::State& s = cuda::state();
  if (!s.started) return;
  H3_CUDA(cudaStreamSynchronize(s.stream));
  const BlockPoolCounts c = s.pool->take_counts();
  if (c.cap_frees > 0) {
    const BlockPoolState now = s.pool->state();
    spdlog::info(
        "GPU allocator since the last release: {} cudaMalloc ({}), {} free segments given back at the budget's cap "
        "({}), {} blocks split; now {} segments ({}), {} in use, the largest free block {}",
        c.mallocs, format_byte_size(c.malloc_bytes), c.cap_frees, format_byte_size(c.cap_free_bytes), c.splits,
        now.segments, format_byte_size(now.reserved), format_byte_size(now.in_use), format_byte_size(now.largest_free));
  }
  s.pool->release();
}

GpuAllocatorCounts gpu_allocator_counts() {
  cuda::State& s = cuda::state();
  if (!s.pool) return {};
  const BlockPoolCounts c = s.pool->counts();
  return {c.mallocs, c.malloc_bytes, c.cap_frees, c.cap_free_bytes, c.splits};
}

void gpu_trim_pinned() {
  if (!cuda::state().started) return;
  const PinnedPoolStats s = cuda::pinned_pool().trim();
  if (s.reused > 0 || s.freed > 0)
    spdlog::info(
        "page-locked host memory since the last trim: {} blocks reused ({}), {} allocated ({}), {} freed "
        "({})",
        s.reused, format_byte_size(s.reused_bytes), s.allocated, format_byte_size(s.allocated_bytes), s.freed,
        format_byte_size(s.freed_bytes));
}

}  // namespace h3

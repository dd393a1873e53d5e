#include "core/tensor.h"

#include <fmt/ranges.h>
#include <cmath>
#include <cstring>

namespace h3 {

std::string shape_str(const Shape& s) {
  return fmt::format("[{}]", fmt::join(s, ", "));
}

int64_t shape_numel(const Shape& s) {
  int64_t n = 1;
  for (auto d : s) n *= d;
  return n;
}

Tensor::Tensor(DType dtype, Shape shape) : dtype_(dtype), shape_(std::move(shape)) {
  for (auto d : shape_) H3_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape_));
  size_t bytes = std::max<size_t>(nbytes(), 1);
  auto buf = std::shared_ptr<std::byte[]>(new std::byte[bytes]());
  data_ = buf.get();
  owner_ = std::shared_ptr<const void>(buf, buf.get());
}

Tensor Tensor::unfilled_host(DType dtype, Shape shape) {
  for (auto d : shape) H3_CHECK(d >= 0, "negative dimension in shape {}", shape_str(shape));
  const size_t bytes = std::max<size_t>(static_cast<size_t>(shape_numel(shape)) * dtype_size(dtype), 1);
  std::shared_ptr<std::byte[]> buf(new std::byte[bytes]);
  void* data = buf.get();
  return Tensor(dtype, std::move(shape), std::shared_ptr<const void>(buf, buf.get()), data);
}

Tensor Tensor::empty(DType dtype, Shape shape, Device device) {
  if (device == Device::cpu) return Tensor(dtype, std::move(shape));
  Tensor t;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  for (auto d : t.shape_) H3_CHECK(d >= 0, "negative dimension in shape {}", shape_str(t.shape_));
  t.device_ = device;
  const DeviceHooks& hooks = device_hooks();
  const size_t bytes = std::max<size_t>(t.nbytes(), 1);
  void* p = hooks.alloc(bytes);
  auto release = hooks.release;
  t.data_ = p;
  t.owner_ = std::shared_ptr<const void>(p, [release, bytes](const void* q) { release(const_cast<void*>(q), bytes); });
  return t;
}

Tensor::Tensor(DType dtype, Shape shape, Device device) {
  *this = empty(dtype, std::move(shape), device);
  if (device != Device::cpu && nbytes() > 0) device_hooks().zero(data_, nbytes());
}

Tensor Tensor::to_device(Device device) const {
  if (device == device_) return *this;
  Tensor out = empty(dtype_, shape_, device);
  if (nbytes() > 0) device_hooks().copy(out.data_, device != Device::cpu, data_, device_ != Device::cpu, nbytes());
  // An fp8 tensor's values are stored x scale: the copy takes its scale along, on the same device.
  if (scale_) out.scale_ = std::make_shared<const Tensor>(scale_->to_device(device));
  out.head_norm_bound_ = head_norm_bound_;
  return out;
}

Tensor::Tensor(DType dtype, Shape shape, std::shared_ptr<const void> owner, void* data, Device device)
    : dtype_(dtype), shape_(std::move(shape)), owner_(std::move(owner)), data_(data), device_(device) {}

Tensor Tensor::reshape(Shape s) const {
  H3_ASSERT(shape_numel(s) == numel(), "reshape {} -> {}", shape_str(shape_), shape_str(s));
  Tensor out(dtype_, std::move(s), owner_, data_, device_);
  out.scale_ = scale_;
  out.head_norm_bound_ = head_norm_bound_;
  return out;
}

Tensor Tensor::with_scale(Tensor scale) const {
  Tensor out = *this;
  out.scale_ = std::make_shared<const Tensor>(std::move(scale));
  return out;
}

Tensor Tensor::with_head_norm_bound(float bound) const {
  H3_CHECK(bound >= 0 && std::isfinite(bound), "a head norm bound must be finite and >= 0, got {}", bound);
  Tensor out = *this;
  out.head_norm_bound_ = bound;
  return out;
}

Tensor Tensor::rows(int64_t begin, int64_t end) const {
  H3_ASSERT(ndim() >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "rows({}, {}) of {}", begin, end,
            shape_str(shape_));
  Shape s = shape_;
  s[0] = end - begin;
  size_t row_bytes = shape_[0] ? nbytes() / static_cast<size_t>(shape_[0]) : 0;
  return Tensor(dtype_, std::move(s), owner_, static_cast<std::byte*>(data_) + begin * row_bytes, device_);
}

namespace {
template <typename T>
double load_as_double(const void* p, int64_t i) {
  return static_cast<double>(static_cast<const T*>(p)[i]);
}
double load(const void* p, DType t, int64_t i) {
  switch (t) {
    case DType::f64:
      return load_as_double<double>(p, i);
    case DType::f32:
      return load_as_double<float>(p, i);
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
    case DType::fp8_e4m3:
      return fp8e4m3_to_f32(static_cast<const uint8_t*>(p)[i]);
    case DType::i64:
      return load_as_double<int64_t>(p, i);
    case DType::i32:
      return load_as_double<int32_t>(p, i);
    case DType::i8:
      return load_as_double<int8_t>(p, i);
    case DType::u8:
      return load_as_double<uint8_t>(p, i);
  }
  return 0;
}
template <typename T>
void store_as(void* p, int64_t i, double v) {
  static_cast<T*>(p)[i] = static_cast<T>(v);
}
void store(void* p, DType t, int64_t i, double v) {
  switch (t) {
    case DType::f64:
      return store_as<double>(p, i, v);
    case DType::f32:
      return store_as<float>(p, i, v);
    case DType::bf16:
      static_cast<uint16_t*>(p)[i] = f32_to_bf16(static_cast<float>(v));
      break;
    case DType::f16:
      static_cast<uint16_t*>(p)[i] = f32_to_f16(static_cast<float>(v));
      break;
    case DType::fp8_e4m3:
      static_cast<uint8_t*>(p)[i] = f32_to_fp8e4m3(static_cast<float>(v));
      break;
    case DType::i64:
      return store_as<int64_t>(p, i, v);
    case DType::i32:
      return store_as<int32_t>(p, i, v);
    case DType::i8:
      return store_as<int8_t>(p, i, v);
    case DType::u8:
      return store_as<uint8_t>(p, i, v);
  }
}
}  // namespace

void convert(const void* src, DType st, void* dst, DType dt, int64_t n) {
  if (st == dt) {
    std::memcpy(dst, src, static_cast<size_t>(n) * dtype_size(st));
    return;
  }
  if (st == DType::i64 && dt == DType::i32) {  // exact integer path, no double round trip
    auto s = static_cast<const int64_t*>(src);
    auto d = static_cast<int32_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = static_cast<int32_t>(s[i]);
    return;
  }
  if (st == DType::i32 && dt == DType::i64) {
    auto s = static_cast<const int32_t*>(src);
    auto d = static_cast<int64_t*>(dst);
    for (int64_t i = 0; i < n; ++i) d[i] = s[i];
    return;
  }
  // f64 -> f32 -> narrow float: narrow formats round from the f32 value, as PyTorch's .to() does.
  for (int64_t i = 0; i < n; ++i) store(dst, dt, i, load(src, st, i));
}

Tensor Tensor::to(DType dt) const {
  if (device_ != Device::cpu) {
    Tensor out = empty(dt, shape_, device_);
    if (numel() > 0) device_hooks().convert(data_, dtype_, out.data_, dt, numel());
    return out;
  }
  Tensor out(dt, shape_);
  convert(data_, dtype_, out.data_, dt, numel());
  return out;
}

double Tensor::get(int64_t i) const {
  H3_ASSERT(i >= 0 && i < numel(), "get({}) of {}", i, describe());
  if (device_ != Device::cpu) {
    alignas(8) std::byte one[8];
    const size_t es = dtype_size(dtype_);
    device_hooks().copy(one, false, static_cast<const std::byte*>(data_) + i * es, true, es);
    return load(one, dtype_, 0);
  }
  return load(data_, dtype_, i);
}

}  // namespace h3

// Tensor: a dtype, a row-major shape and a pointer into shared storage (owned memory or a memory-mapped file).
// Views share the storage; nothing here copies unless asked to.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/error.h"

namespace h3 {

enum class Device : uint8_t { cpu, cuda };

using Shape = std::vector<int64_t>;
std::string shape_str(const Shape& s);
int64_t shape_numel(const Shape& s);

// Maps a C++ element type to its DType; any other type fails to compile (no return for it).
template <typename T>
constexpr DType dtype_for() {
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  if constexpr (std::is_same_v<T, int32_t>) return DType::i32;
  if constexpr (std::is_same_v<T, int8_t>) return DType::i8;
  if constexpr (std::is_same_v<T, uint8_t>) return DType::u8;
}
template <typename T>
struct dtype_of {
  static constexpr DType value = dtype_for<T>();
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled host memory.
  Tensor(DType dtype, Shape shape);
  // Allocates zero-filled memory on `device`.
  Tensor(DType dtype, Shape shape, Device device);
  // Allocates without filling (device memory; host memory is zero-filled anyway).
  static Tensor empty(DType dtype, Shape shape, Device device);
  // Host memory left unfilled, for buffers written whole right after (a zero fill would be one more pass over them).
  static Tensor unfilled_host(DType dtype, Shape shape);
  // A view of memory kept alive by `owner`.
  Tensor(DType dtype, Shape shape, std::shared_ptr<const void> owner, void* data, Device device = Device::cpu);

  template <typename T>
  static Tensor from(const std::vector<T>& v, Shape shape) {
    Tensor t(dtype_of<T>::value, std::move(shape));
    H3_ASSERT(static_cast<size_t>(t.numel()) == v.size(), "from(): {} values for shape {}", v.size(),
              shape_str(t.shape()));
    std::copy(v.begin(), v.end(), t.data<T>());
    return t;
  }

  bool defined() const { return data_ != nullptr || numel() == 0; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int64_t dim(int i) const { return shape_.at(i < 0 ? shape_.size() + i : i); }
  int ndim() const { return static_cast<int>(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t nbytes() const { return static_cast<size_t>(numel()) * dtype_size(dtype_); }
  void* raw() const { return data_; }

  template <typename T>
  T* data() const {
    H3_ASSERT(dtype_of<T>::value == dtype_, "data<{}>() on a {} tensor", dtype_name(dtype_of<T>::value),
              dtype_name(dtype_));
    return static_cast<T*>(data_);
  }
  template <typename T>
  std::span<T> span() const {
    return {data<T>(), static_cast<size_t>(numel())};
  }

  // Same storage, new shape (numel must match).
  Tensor reshape(Shape s) const;
  // Rows [begin, end) along the first dimension, sharing storage.
  Tensor rows(int64_t begin, int64_t end) const;
  // A deep copy, converted to `dt` (any float <-> float, int <-> int, int -> float), on the same device.
  // Converting to the tensor's own dtype on a device tensor copies too.
  Tensor to(DType dt) const;
  // A copy on `device` (the tensor itself when it is already there).
  Tensor to_device(Device device) const;
  Tensor cpu() const { return to_device(Device::cpu); }
  bool on_device() const { return device_ != Device::cpu; }
  Tensor clone() const { return to(dtype_); }
  // Element i (row-major) as double, for any dtype (device tensors: one small copy).
  double get(int64_t i) const;
  std::string describe() const { return std::string(dtype_name(dtype_)) + shape_str(shape_); }
  // Quantized tensors (fp8) carry their dequantization scale: value = stored * scale (an f32 tensor of one
  // element for per-tensor scaling). Views and copies keep it; conversions drop it.
  const Tensor* scale() const { return scale_.get(); }
  Tensor with_scale(Tensor scale) const;
  // An fp8 tensor of attention heads may also carry a bound on the L2 norm of any head (head_dim consecutive stored
  // values of a row), in stored units: q and k from a norm with a fixed scale have one, and FP8 attention then takes
  // its faster kernel where |q . k| <= the two bounds' product allows (backend/cuda/attention/wgmma.h, f16 scores).
  // 0: unknown. Kept and dropped as the scale is.
  float head_norm_bound() const { return head_norm_bound_; }
  Tensor with_head_norm_bound(float bound) const;

 private:
  DType dtype_ = DType::f32;
  Shape shape_;
  std::shared_ptr<const void> owner_;
  void* data_ = nullptr;
  Device device_ = Device::cpu;
  std::shared_ptr<const Tensor> scale_;
  float head_norm_bound_ = 0;
};

// Element-wise conversion of n values between dtypes (host memory).
void convert(const void* src, DType src_t, void* dst, DType dst_t, int64_t n);

}  // namespace h3

// Weight loading shared by the two VAEs: reads "<prefix><name>" from a TensorSource (a file, a sharded checkpoint
// folder, procedural weights), checks its shape, and hands it out in the compute dtype on the host (get) or in a
// chosen dtype on the loader's device (load: io/device_loader.h, no host copy), collecting every missing or
// mis-shaped key so that one error lists them all.
#pragma once
#include <string>
#include <vector>

#include "io/device_loader.h"
#include "io/tensor_source.h"

namespace h3 {

class VaeWeightReader {
 public:
  // `host` reads the host tensors (a Device::cpu loader: parallel reads, counted in its report).
  VaeWeightReader(const TensorSource& f, std::string prefix, DType compute, std::string what, DeviceLoader& host)
      : f_(f), prefix_(std::move(prefix)), ct_(compute), what_(std::move(what)), host_(host) {}
  // The tensor in host memory converted to the compute dtype; `shape` empty = any shape. A missing or mis-shaped
  // key is recorded and a zero tensor of `shape` returned so that loading can go on and report everything at once.
  Tensor get(const std::string& name, const Shape& shape);
  // The tensor (its rows `rows`, in order, when given) on `loader`'s device in `dtype`; `shape` is the stored
  // shape, checked like get's (a zero tensor of the result's shape stands in for a missing one).
  Tensor load(DeviceLoader& loader, const std::string& name, const Shape& shape, DType dtype,
              const std::vector<RowRange>& rows = {});
  bool has(const std::string& name) const { return f_.has(prefix_ + name); }
  // Throws h3::Error listing every problem (call once all weights are read).
  void finish() const;

 private:
  bool check(const std::string& key, const Shape& shape);
  void refuse_non_finite(const std::string& key, const Tensor& t) const;
  const TensorSource& f_;
  std::string prefix_;
  DType ct_;
  std::string what_;
  DeviceLoader& host_;
  std::vector<std::string> missing_, misshaped_;
};

}  // namespace h3

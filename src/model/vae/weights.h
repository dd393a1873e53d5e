// Weight loading shared by the two VAEs: reads "<prefix><name>" from a safetensors file, checks its shape, converts
// it to the compute dtype, and collects every missing or mis-shaped key so that one error lists them all.
#pragma once
#include <string>
#include <vector>

#include "io/safetensors.h"

namespace h3 {

class VaeWeightReader {
 public:
  VaeWeightReader(const SafeTensors& f, std::string prefix, DType compute, std::string what)
      : f_(f), prefix_(std::move(prefix)), ct_(compute), what_(std::move(what)) {}
  // The tensor converted to the compute dtype; `shape` empty = any shape. A missing or mis-shaped key is recorded
  // and a zero tensor of `shape` returned so that loading can go on and report everything at once.
  Tensor get(const std::string& name, const Shape& shape);
  bool has(const std::string& name) const { return f_.has(prefix_ + name); }
  // Throws h3::Error listing every problem (call once all weights are read).
  void finish() const;

 private:
  const SafeTensors& f_;
  std::string prefix_;
  DType ct_;
  std::string what_;
  std::vector<std::string> missing_, misshaped_;
};

}  // namespace h3

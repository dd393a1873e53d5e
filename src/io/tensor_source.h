// Where a model's named tensors come from: a safetensors file or a sharded checkpoint folder (io/weight_files.h), or
// the procedural formula (io/procedural.h: ProceduralWeights). A model that reads through this loads from any of
// them, on the host or straight onto the device (io/device_loader.h).
#pragma once
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/device_loader.h"

namespace h3 {

class TensorSource {
 public:
  virtual ~TensorSource() = default;
  // The file, folder or procedural spec, for messages.
  virtual const std::string& path() const = 0;
  virtual bool has(const std::string& key) const = 0;
  // Stored shape and dtype (procedural tensors: f32); throw naming the source and key when absent.
  virtual Shape shape(const std::string& key) const = 0;
  virtual DType dtype(const std::string& key) const = 0;
  // The tensor in host memory in its stored dtype (a file's tensor is a zero-copy view of its mapping).
  virtual Tensor get(const std::string& key) const = 0;
  // The rows `rows` of `key` (ranges of its first dimension, in order; all of it when empty) on `loader`'s device
  // in `dtype` (DeviceLoader::load's rules), counted in the loader's report.
  virtual Tensor load(DeviceLoader& loader, const std::string& key, DType dtype,
                      const std::vector<RowRange>& rows = {}) const = 0;
  // The folder's config.json, else a file's "config" metadata, else "".
  virtual std::string config_json() const { return ""; }
  // A metadata value of the (first) file, "" when absent.
  virtual std::string meta(const std::string& name) const { return ""; }
};

// Rows `rows` (ranges of the first dimension, in order) of `t` as one new tensor on t's device.
Tensor gather_row_ranges(const Tensor& t, const std::vector<RowRange>& rows);

}  // namespace h3

// `h3 convert`: the whole DiT written as one safetensors file in any accepted layout, optionally with the blocks'
// GEMM weights quantized (io/quant.h) and LoRAs baked in; streamed, so a full-size model never sits in memory, and
// made on the GPU when there is one (generated, fused and quantized there).
#pragma once
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/quant.h"
#include "model/dit/checkpoint.h"

namespace h3 {

enum class ExportLayout { diffusers, official, comfy };
ExportLayout export_layout_from_name(const std::string& s);

// One parameter of the exported file: its name (layout prefix included), the shape of its float value, whether it
// is a block GEMM weight written quantized, and how to make the value (f32, or the stored float dtype) on a device.
struct ExportItem {
  std::string name;
  Shape shape;
  bool quantized = false, input_scale = false;
  std::function<Tensor(Device)> make;
};

// The whole DiT as the file `h3 convert` writes, in `layout` (official: released names, per-head interleaved
// qkv_proj, fc1 = [gate; value]; comfy: the same, qkv blocked, "model.diffusion_model." prefix), float parameters in
// `dt`, the blocks' GEMM weights quantized as `quant`; LoRAs of `ck` are baked in. Nothing is computed until an
// item is made.
struct ExportPlan {
  DType dtype = DType::f32;
  QuantFormat quant = QuantFormat::none;
  std::vector<ExportItem> items;
  std::map<std::string, std::string> metadata;
  // The file's tensors in order (scaled_fp8's marker, then each item and its scale tensors): the header.
  std::vector<SafeTensorsEntry> entries() const;
};
ExportPlan plan_export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant);

// The tensors item `i` contributes to the file, in host memory, its value made on `device`. On the GPU the value
// is generated (procedural weights), fused and converted there, and FP8 / scaled FP8 weights are quantized there
// (bitwise the host's quantize_weight); the other formats are quantized on the host.
std::vector<std::pair<std::string, Tensor>> export_item(const ExportPlan& plan, size_t i, Device device);

struct ExportStats {
  size_t file_bytes = 0;
  double seconds = 0;
};
// Streams the plan into `path` (SafeTensorsWriter: one tensor in memory at a time, written while the next is made),
// the values made on `device`.
ExportStats write_export(const ExportPlan& plan, const std::string& path, Device device);

// The whole export in memory (small models and tests): the same tensors, in file order, and the metadata.
void export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant,
                std::vector<std::pair<std::string, Tensor>>& tensors, std::map<std::string, std::string>& metadata);

}  // namespace h3

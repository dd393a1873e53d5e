// `h3 convert`: the whole DiT written as one safetensors file in any accepted layout, optionally with the blocks'
// GEMM weights quantized (io/quant.h) and LoRAs baked in.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "io/quant.h"
#include "model/dit/checkpoint.h"

namespace h3 {

enum class ExportLayout { diffusers, official, comfy };
ExportLayout export_layout_from_name(const std::string& s);

// The whole DiT as safetensors tensors and metadata, in `layout` (official: released names, per-head
// interleaved qkv_proj, fc1 = [gate; value]; comfy: the same, qkv blocked, "model.diffusion_model." prefix),
// float parameters in `dt`, the blocks' GEMM weights quantized as `quant`. LoRAs of `ck` are baked in.
void export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant,
                std::vector<std::pair<std::string, Tensor>>& tensors, std::map<std::string, std::string>& metadata);

}  // namespace h3

// Quantized DiT checkpoints (h3-model-spec §9): written by `h3 convert --quant`, dequantized to f32 on load
// on the CPU (DitCheckpoint::get returns the dequantized tensor; the model then runs in its compute dtype as
// usual).
//
// Formats, per quantized Linear "<layer>" (the blocks' qkv/out_proj/fc1/fc2; AdaLN, refiner, projections and
// the final layer stay in float, as the third-party H3 quant presets do):
//   fp8          ComfyUI comfy_quant: <layer>.weight F8_E4M3, <layer>.weight_scale f32 scalar,
//   <layer>.input_scale
//                f32 scalar (activation scale, unused on load), <layer>.comfy_quant = U8 JSON
//                {"format": "float8_e4m3fn"}. W = fp8 * weight_scale; weight_scale = amax(|W|) / 448.
//   scaled_fp8   legacy ComfyUI: top-level marker "scaled_fp8" (F8_E4M3, 0 elements) and <layer>.scale_weight
//   f32
//                scalar. W = fp8 * scale_weight.
//   int8         comfy_quant {"format": "int8_tensorwise"}: <layer>.weight I8, <layer>.weight_scale f32 [out,
//   1]
//                (per output row). W[i][j] = q[i][j] * s[i]; s[i] = amax_j |W[i][j]| / 127, q =
//                round-half-even.
//   int8-convrot the same with {"convrot": true, "convrot_groupsize": g}: the stored matrix is the weight
//   rotated
//                over its input columns by the orthonormal Sylvester Hadamard H_g (entries +-1/sqrt(g),
//                symmetric, H_g H_g = I), block-diagonal over consecutive groups of g columns: Q s = W H.
//                Dequantized W = (q s) H. At run time W x = (W H)(H x), which is why the runtime rotates the
//                input instead. g = 256 (spec §9), or the largest power of two dividing the input width when
//                256 does not. The spec names only "a Hadamard convrot input rotation (group 256)"; the
//                orientation and the normalisation above are ours (inferred), and dequantization is exact for
//                any orthonormal H.
// Row-indexed scales belong to the rows as stored: a per-head interleaved qkv_proj is dequantized in stored
// row order with its scale rows, then de-interleaved, so its scales move with their rows.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace h3 {

class DitCheckpoint;

enum class QuantFormat { none, fp8, scaled_fp8, int8, int8_convrot };
QuantFormat quant_format_from_name(const std::string& s);
std::string_view quant_format_name(QuantFormat f);

// How one stored weight is dequantized.
struct QuantSpec {
  enum Kind { none, fp8, int8 } kind = none;
  std::string scale_key;  // key in the same file holding the scale
  int convrot_group = 0;  // 0: no rotation
};

// Dequantizes `q` (F8_E4M3 or I8, 2-D) with `scale` to f32. `where` names the file and key in errors.
Tensor dequantize_weight(const Tensor& q, const Tensor& scale, const QuantSpec& spec,
                         const std::string& where);
// Applies the orthonormal Hadamard H_g to every group of g consecutive columns of a 2-D f32 tensor, in place.
void hadamard_columns_(Tensor& t, int g);
// The convrot group for an input width: 256, or the largest power of two dividing `in`.
int convrot_group_for(int64_t in);

enum class ExportLayout { diffusers, official, comfy };
ExportLayout export_layout_from_name(const std::string& s);

// The whole DiT as safetensors tensors and metadata, in `layout` (official: released names, per-head
// interleaved qkv_proj, fc1 = [gate; value]; comfy: the same, qkv blocked, "model.diffusion_model." prefix),
// float parameters in `dt`, the blocks' GEMM weights quantized as `quant`. LoRAs of `ck` are baked in.
void export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant,
                std::vector<std::pair<std::string, Tensor>>& tensors,
                std::map<std::string, std::string>& metadata);

}  // namespace h3

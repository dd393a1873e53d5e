// Quantized weights (h3-model-spec §9): the formats `h3 convert --quant` writes (model/dit/export.h) and
// dequantize-on-load reads back to f32 on the CPU (DitCheckpoint::get returns the dequantized tensor; the model then
// runs in its compute dtype as usual).
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
//   nvfp4        comfy_quant {"format": "nvfp4"} (ComfyUI / comfy-kitchen TensorCoreNVFP4Layout):
//   <layer>.weight U8
//                [rows, cols / 2], two e2m1 codes per byte, the EVEN column in the HIGH nibble (kitchen's
//                hi_first packing: byte = code[2k] << 4 | code[2k+1]); code bits s e e m, values
//                0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives. <layer>.weight_scale F8_E4M3: one block
//                scale per 16 consecutive columns of a row, stored in cuBLAS's swizzled 128x4 tiling
//                (kitchen's to_blocked): for row r and block b of a [R, B] scale matrix padded to Rp =
//                roundup(R, 128), Bp = roundup(B, 4),
//                  index(r, b) = ((r / 128) * (Bp / 4) + b / 4) * 512 + (r % 32) * 16 + ((r % 128) / 32) * 4
//                  + b % 4
//                (row-major over 128x4 atoms; any shape whose element count is Rp * Bp is accepted).
//                <layer>.weight_scale_2 f32 scalar (per tensor), <layer>.input_scale f32 (activations, unused
//                on load). W[r][c] = e2m1(code) * (weight_scale_2 * e4m3(block scale)). Quantization as
//                kitchen: scale_2 = amax / (448 * 6); block scale = e4m3(min(amax_block / 6 / scale_2, 448));
//                codes round to nearest, ties to the even code, clamped to +-6. Rows and columns must be
//                multiples of 16 (every H3 GEMM is; kitchen pads otherwise and this engine refuses such files
//                by shape). Hopper has no FP4 tensor cores: the weights are dequantized on load like the
//                other formats.
//   mxfp8        comfy_quant {"format": "mxfp8"} (kitchen TensorCoreMXFP8Layout): <layer>.weight F8_E4M3 [rows, cols],
//                <layer>.weight_scale F8_E8M0 (read as its bytes): one exponent e per 32 consecutive columns of a row,
//                in the same swizzled 128x4 tiling (index(r, b) above with blocks = cols / 32), value 2^(e - 127).
//                W = fp8 * 2^(e - 127); quantization as kitchen: e = clamp(ceil(log2(max(amax_block / 448,
//                2^-127))) + 127, 0, 254), 0 for an all-zero block. This writer stores the exponents as U8 (the
//                same bytes; readers that insist on the F8_E8M0 name would need a re-tag).
// Row-indexed scales belong to the rows as stored: a per-head interleaved qkv_proj is dequantized in stored
// row order with its scale rows, then de-interleaved, so its scales move with their rows.
#pragma once
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace h3 {

enum class QuantFormat { none, fp8, scaled_fp8, int8, int8_convrot, nvfp4, mxfp8 };
QuantFormat quant_format_from_name(const std::string& s);
std::string_view quant_format_name(QuantFormat f);

// How one stored weight is dequantized.
struct QuantSpec {
  enum Kind { none, fp8, int8, nvfp4, mxfp8 } kind = none;
  std::string scale_key;   // key in the same file holding the scale (nvfp4: the block scales)
  std::string scale2_key;  // nvfp4: the per-tensor second-level scale
  int convrot_group = 0;   // 0: no rotation
};

// Dequantizes `q` (F8_E4M3 or I8, 2-D) with `scale` to f32. `where` names the file and key in errors.
Tensor dequantize_weight(const Tensor& q, const Tensor& scale, const QuantSpec& spec, const std::string& where);
// NVFP4 (layout above): packed U8 [R, C/2], block scales F8_E4M3 (R x C/16 swizzled), scale_2 -> f32 [R, C].
Tensor dequantize_nvfp4(const Tensor& packed, const Tensor& block_scales, float scale_2, const std::string& where);
// MXFP8 (layout above): F8_E4M3 [R, C], exponent bytes (R x C/32 swizzled) -> f32 [R, C].
Tensor dequantize_mxfp8(const Tensor& q, const Tensor& exponents, const std::string& where);
// The swizzled position of row r, block b's scale in a scale matrix of `blocks` blocks per row (layout
// above).
int64_t nvfp4_scale_index(int64_t r, int64_t b, int64_t blocks);
// The logical [out, in] shape of a stored quantized weight (nvfp4 packs two columns per byte).
Shape quant_logical_shape(const QuantSpec& spec, const Shape& stored);
// Applies the orthonormal Hadamard H_g to every group of g consecutive columns of a 2-D f32 tensor, in place.
void hadamard_columns_(Tensor& t, int g);
// The convrot group for an input width: 256, or the largest power of two dividing `in`.
int convrot_group_for(int64_t in);

// Appends weight `name` ("<layer>.weight", f32 [out, in]) quantized as `q` to `out`, with its scale tensors and
// comfy_quant marker as laid out above; `input_scale` adds the (unused on load) activation scale of 1.
void quantize_weight(const std::string& name, const Tensor& w, QuantFormat q, bool input_scale,
                     std::vector<std::pair<std::string, Tensor>>& out);
// The tensors quantize_weight appends for a weight `name` of `shape` (names, dtypes and shapes, in order), for
// writers that need the header before the data (SafeTensorsWriter).
std::vector<SafeTensorsEntry> quantized_entries(const std::string& name, const Shape& shape, QuantFormat q,
                                                bool input_scale);
// quantize_weight's result for fp8 / scaled_fp8 from values already quantized elsewhere (the GPU): `data` e4m3 =
// fp8(w / scale) with scale = amax(|w|) / 448 (1 for an all-zero weight).
void append_fp8_weight(const std::string& name, Tensor data, float scale, QuantFormat q, bool input_scale,
                       std::vector<std::pair<std::string, Tensor>>& out);

}  // namespace h3

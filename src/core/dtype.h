// Element types, their sizes and names, and the scalar conversions between them (bf16, f16 and fp8 e4m3 are
// stored as raw bits; conversions round to nearest even as PyTorch does).
#pragma once
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace h3 {

enum class DType : uint8_t { f64, f32, bf16, f16, fp8_e4m3, i64, i32, i8, u8 };

size_t dtype_size(DType t);
std::string_view dtype_name(DType t);                             // "f32", "bf16", ...
std::string_view dtype_safetensors_name(DType t);                 // "F32", "BF16", "F8_E4M3", ...
std::optional<DType> dtype_from_safetensors(std::string_view s);  // nullopt for unknown names
bool dtype_is_float(DType t);

// Inline: the host-side loops over bf16 (the CPU backend's rounding, the MPI sum of bf16 partials) run them once per
// element, and an out-of-line call per element kept a 101M-element sum at ~0.3 s on one core.
inline float bf16_to_f32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}
inline uint16_t f32_to_bf16(float f) {  // round to nearest even; NaN stays NaN
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if (std::isnan(f)) return static_cast<uint16_t>((u >> 16) | 0x40);
  const uint32_t rounding_bias = 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>((u + rounding_bias) >> 16);
}
float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
float fp8e4m3_to_f32(uint8_t v);
uint8_t f32_to_fp8e4m3(float f);  // saturating to +-448, round to nearest even

// How a model computes. f64 / f32: every op in that precision. bf16: the released mixed recipe (the DiT's blocks,
// context embedder and AdaLN in bf16 with f32 accumulation; patch projections, time embedder and output heads in
// f32), emulated on the CPU by rounding each op's result to bf16. fp8 (GPU only): the bf16 recipe with the blocks'
// projection and MLP GEMMs in FP8 e4m3 (weights scaled per tensor at load, activations per tensor on the fly).
enum class Precision : uint8_t { f64, f32, bf16, fp8 };
std::string_view precision_name(Precision p);
Precision precision_from_name(const std::string& s);  // throws naming the allowed names

// Rounds a value through bf16 and back (used to emulate the released bf16 recipe on the CPU).
inline float round_bf16(float f) {
  return bf16_to_f32(f32_to_bf16(f));
}

}  // namespace h3

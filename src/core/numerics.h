// How the GPU computes, as data: given to the GPU backend when it starts (backend/backend.h: GpuOptions) and to the
// models that choose ops by it (the DiT's options), both from tools/main.cpp (core/knobs.h). The CPU backend's
// reduction orders are fixed, so on the CPU none of this changes a result.
#pragma once
#include <cstdint>
#include <string>

namespace h3 {

// FP8 attention in the fp8 recipe: our FP8 kernel where it runs, else bf16 attention of the dequantized values
// (on); always the bf16 attention (off); or an error where the FP8 kernel cannot run (require: tests, benchmarks,
// where a silent fallback would hide it).
enum class Fp8Attention : uint8_t { on, off, require };
std::string_view fp8_attention_name(Fp8Attention a);  // "auto", "off", "require"

struct Numerics {
  // Fixed GEMM algorithms (one per weight shape, no split-K, no timing) and attention choices, FP8 scales per row
  // (weights and activations) and bf16 attention in the fp8 recipe: ulysses / ulysses-ag runs are bitwise the same
  // at every world size.
  bool deterministic = false;
  Fp8Attention fp8_attention = Fp8Attention::on;
  // FP8 GEMMs accumulate at the tensor cores' full rate, without cuBLASLt's periodic promotion to f32 (the fp8
  // recipe's 4e-2 tolerance leaves room for it).
  bool fp8_fast_accum = true;

  // FP8 activations are quantized per row (else per tensor): in deterministic mode, where a per-tensor scale would
  // depend on the rows a rank holds.
  bool fp8_row_scales() const { return deterministic; }
};

}  // namespace h3

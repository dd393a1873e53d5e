// `h3 verify` for the text conditioner's golden files: the Qwen3-VL text decoder set (hidden states per case)
// and the tokenizer cases (exact ids per string).
#pragma once
#include <string>

#include "distributed/comm.h"
#include "io/safetensors.h"
#include "verify/dit.h"

namespace h3 {

// A file with a Qwen3 text decoder under "weight." and at least one "<case>.input_ids".
bool looks_like_qwen3vl_text_golden(const SafeTensors& f);
// Runs every case ("<case>.input_ids") and compares each stored "<case>.hidden_states_K" and
// "<case>.last_hidden_state_normed" with the engine's at rel-L2 1e-5 (f32) or 1e-6 (f64). The file stores the
// weights and the f64 reference's outputs as f32; the f32-rounded weights put a floor of ~3e-7 under any
// engine, so f64 cannot show more than that here.
// With `comm` of N > 1 ranks the tower runs tensor-parallel over it (model/qwen3vl/text.h), and rank 0 also reruns
// every case on one rank: a line per output "vs 1 rank" at rel-L2 1e-6 (the design gives identical bits; max_abs shows
// it). `device` Device::cuda runs on the GPU (f32 or bf16). bf16 has no default bound against this f64-only set:
// pass `bf16_errors`, a JSON file {"bf16": {"<case>.<output>": rel_l2}} of transformers' own bf16 errors on it
// (tests/reference/qwen3vl-text-mini-bf16-errors.json, measured by scripts/device/make_qwen3vl_text_golden.py): each
// output is then held to 1.5x its own. `tolerance` > 0 overrides every bound.
VerifyReport verify_qwen3vl_text_file(const SafeTensors& f, Precision precision, Comm* comm = nullptr,
                                      Device device = Device::cpu, double tolerance = -1,
                                      const std::string& bf16_errors = "");

// A reference of the text tower at the released width made by scripts/device/make_qwen3vl_text_golden.py (metadata
// "format": "qwen3vl-text-procedural/1"): inputs and f64 outputs only, the weights regenerated from the procedural
// formula (seed and names in the metadata).
bool looks_like_qwen3vl_text_procedural_reference(const SafeTensors& f);
// Every case with its mRoPE positions; each stored hidden state against the f64 reference at 1.5x transformers' own
// error for bf16 (metadata reference_rel_l2_vs_f64, per case and state), 1e-5 for f32, 1e-6 for f64 (`tolerance` > 0
// overrides). With `comm` of N > 1 ranks: tensor-parallel, plus rank 0's 1-rank rerun ("vs 1 rank" lines, 1e-6).
VerifyReport verify_qwen3vl_text_procedural(const SafeTensors& f, Precision precision, Comm* comm = nullptr,
                                            Device device = Device::cpu, double tolerance = -1);
// One line per case of `cases_json` ({"cases": [{"text", "ids", optional "decode": true}]}): rel_l2 0 when
// the ids are exactly the expected ones, 1 otherwise, tolerance 0. Cases with "decode": true (or a "decoded"
// string) get a second line for decode(ids) == text (or == decoded). Throws h3::Error naming the file on bad
// JSON.
VerifyReport verify_tokenizer_cases(const std::string& cases_json, const std::string& tokenizer_json);

}  // namespace h3

// Procedural Qwen3-VL towers: procedural:mini and procedural:full (below). The mini one, for the mini pipeline: a
// 50-layer Qwen3 text tower of width 64 (the mini DiT's text_dim) with a 3-block vision tower beside it (width 32, the
// released patch/merge sizes, DeepStack into LM layers 0-2), and a byte-level tokenizer (256 ids, one per byte, no
// merges, plus Qwen's four vision tokens at 256..259). Weights follow the procedural formula of shared/golden/README.md
// (io/procedural.h); they load through the same classes as a real checkpoint.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "io/safetensors.h"
#include "model/qwen3vl/text.h"
#include "model/qwen3vl/vision.h"
#include "model/qwen3vl/weights.h"

namespace h3 {

Qwen3VlTextConfig procedural_qwen3vl_text_config();
Qwen3VlVisionConfig procedural_qwen3vl_vision_config();

// The text tower's keys and shapes.
std::vector<std::pair<std::string, Shape>> qwen3vl_text_parameters(const Qwen3VlTextConfig& c);
// The vision tower's keys under `prefix` ("visual." as in Qwen3-VL checkpoints).
std::vector<std::pair<std::string, Shape>> qwen3vl_vision_parameters(const Qwen3VlVisionConfig& c,
                                                                     const std::string& prefix);

// Text and vision towers in one mapped file, with the config.json text in its "config" metadata.
std::shared_ptr<SafeTensors> procedural_qwen3vl_text_file(uint64_t seed);

// Qwen3-VL-32B's towers at the released shapes (Qwen3VlTextConfig{}: 64 decoder layers of width 5120, 64 query / 8 KV
// heads x 128, FFN 25600, vocabulary 151936; Qwen3VlVisionConfig{}: 27 blocks of width 1152, DeepStack after 8, 16,
// 24), procedural weights under the same names as the mini towers (text keys bare, the vision tower under
// "visual."). Nothing is generated here: each tensor is generated where it is loaded (Qwen3VlTextWeights::load, on the
// GPU for a GPU model), so no host copy of the towers ever exists. ~33 G values; H3 loads the first 50 layers.
Qwen3VlTextWeights procedural_qwen3vl_full(uint64_t seed);
// The text encoder a "procedural:NAME[:seed=N]" spec names: mini (procedural_qwen3vl_text_file) or full
// (procedural_qwen3vl_full). `what` names the flag in errors (e.g. "--text-encoder").
Qwen3VlTextWeights procedural_qwen3vl(const std::string& spec, const char* what);
// tokenizer.json text of the built-in byte-level tokenizer (Qwen2 format, read by model/qwen3vl/tokenizer.h).
std::string builtin_tokenizer_json();

}  // namespace h3

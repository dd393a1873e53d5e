// LoRA adapters for the DiT, merged into the weights on load (h3-model-spec §9, "LoRA").
//
// Accepted layouts, detected from the keys (one layout per file):
//   ai-toolkit   "diffusion_model.<module>.lora_A.weight" / ".lora_B.weight"
//   reference    "<module>.lora_A.weight" / ".lora_B.weight" with released or diffusers module names
//   (optionally
//                under "transformer." or "base_model.model.")
//   kohya        "lora_unet_<module with '.' -> '_'>.lora_down.weight" / ".lora_up.weight" / ".alpha"
//   (musubi-tuner) peft         "<module>.lora_A.default.weight" / ".lora_B.default.weight" (DiffSynth):
//   trained on the released
//                per-head interleaved qkv_proj, so its qkv lora_B rows are interleaved too
// Row order of lora_B follows the module it was trained on, and is brought to diffusers order here:
//   released qkv_proj   B rows [q_all; k_all; v_all] (blocked) or [h0: q k v | h1: ...] (interleaved), cut
//   into
//                       thirds for to_q / to_k / to_v (lora_A shared)
//   released mlp.fc1    B rows [gate; value] -> [value; gate] (the order of ff.net.0.proj)
// Scale per module: s = strength * alpha / rank, alpha = the module's ".alpha", else "alpha" (or
// "lora_alpha") in the file's __metadata__, else rank (what diffusers pins for the alpha-less published H3
// LoRAs).
//
// Merge, per element: W'[i][j] = f32( W[i][j] + s * sum_{r = 0..rank-1} B[i][r] * A[r][j] ), the sum taken in
// f64 in ascending r, one LoRA after another in the order given. Every element depends only on its own row of
// B and its own column of A, so a rank that merges a row or column slice gets bitwise the values of the full
// merge.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/dit/config.h"

namespace h3 {

enum class LoraLayout { ai_toolkit, reference, kohya, peft };
std::string_view lora_layout_name(LoraLayout l);

// One adapted parameter, in diffusers naming and row order.
struct LoraTarget {
  std::string source;  // the module's name in the file (for messages)
  Tensor down;         // A [rank, in] f32
  Tensor up;           // B [out, rank] f32, diffusers row order
  double scale = 1;    // strength * alpha / rank
};

struct LoraFile {
  std::string path;
  double strength = 1;
  LoraLayout layout = LoraLayout::reference;
  bool qkv_interleaved = false;
  std::map<std::string, LoraTarget> targets;  // by diffusers parameter name ("...attn.to_q.weight")
  std::map<int64_t, int> ranks;               // rank -> number of modules
  int modules = 0;                            // modules in the file (qkv counts once)
  uint64_t digest = 0;                        // FNV-1a over strength, targets, A, B and scales

  // Reads and checks a LoRA against a DiT config; throws naming the file and key for unknown or mis-shaped
  // keys. interleaved_override: 1 forces interleaved qkv B rows, 0 blocked, -1 detects (peft .default. /
  // metadata).
  static LoraFile open(const std::string& path, double strength, const DitConfig& config,
                       int interleaved_override = -1);
  std::string describe() const;
};

// "FILE[:STRENGTH]" -> (file, strength). A trailing ":<number>" is the strength (default 1).
std::pair<std::string, double> parse_lora_spec(const std::string& spec);

// Merges the LoRAs' deltas into rows [r0, r1) and columns [c0, c1) of parameter `key`; `base` holds exactly
// that block (any float dtype). Returns f32 (f64 when base is f64). Base is returned unchanged when no LoRA
// targets key.
Tensor lora_merge(const Tensor& base, const std::string& key, int64_t r0, int64_t r1, int64_t c0, int64_t c1,
                  const std::vector<std::shared_ptr<const LoraFile>>& loras);

class DitCheckpoint;
// Adds every "FILE[:STRENGTH]" of --lora to `ck` and logs what was detected. Test hook for the agreement
// test: H3_DEBUG_LORA="RANK:FILE[:STRENGTH]" makes the process of world rank RANK load that LoRA instead.
void add_loras(DitCheckpoint& ck, const std::vector<std::string>& specs, int world_rank);

// `h3 info` for a LoRA file: true when `path` looks like a LoRA (keys with lora_A / lora_down).
bool looks_like_lora(const std::string& path);

}  // namespace h3

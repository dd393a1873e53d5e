// The DiT's shape parameters (diffusers names) and the list of parameters they imply.
#pragma once
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace h3 {

struct DitConfig {
  int num_attention_heads = 56;
  int attention_head_dim = 128;
  int hidden_size = 5376;
  int num_layers = 50;
  int num_refiner_layers = 2;
  int ffn_dim = 14336;
  int in_channels = 24;
  int audio_in_channels = 32;
  int patch_t = 1, patch_h = 2, patch_w = 2;
  int text_dim = 5120;
  int freq_dim = 256;
  int time_embed_hidden_dim = 5376;
  int time_embed_dim = 2688;
  int rope_freq_dim = 16;
  double rope_theta = 10000.0;
  double norm_eps = 1e-5;
  double qk_norm_eps = 1e-5;
  double final_norm_eps = 1e-5;

  int inner_dim() const { return num_attention_heads * attention_head_dim; }  // bounded by validate()
  int video_patch_dim() const { return in_channels * patch_t * patch_h * patch_w; }
  int rotary_dim() const { return 6 * rope_freq_dim; }

  // "mini" (the dit-mini widths), "fullwidth-1block", "full" (the released model); nullopt for other names.
  static std::optional<DitConfig> named(const std::string& name);
  // Reads a diffusers config.json object or the golden files' "config" metadata (either naming), over defaults.
  static DitConfig from_json_text(const std::string& json_text, const std::string& where);
  std::string to_json_text() const;
  // Throws naming `where` if the numbers are inconsistent (head_dim vs rotary dims, zero sizes, ...).
  void validate(const std::string& where) const;
  bool operator==(const DitConfig&) const = default;

  // Every parameter (diffusers key and shape), blocks in order.
  std::vector<std::pair<std::string, Shape>> parameters() const;
  int64_t parameter_count() const;
};

}  // namespace h3

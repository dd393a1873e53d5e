// The Qwen3-VL text decoder as H3's text conditioner, on the CPU in f32 or f64: token embeddings, then
// decoder layers of causal grouped-query attention (per-head q/k RMSNorm, interleaved mRoPE) and a SwiGLU
// MLP, each with a pre-RMSNorm and a residual. hidden_states[0] is the embedding output and hidden_states[k]
// the output of decoder layer k-1; H3 conditions on hidden_states[50], unnormalised, so only the first 50
// layers are loaded.
//
// Precision flow: as in the project's other golden sets, inv_freq and the positions are rounded to f32, then
// the angles, cos/sin and everything else are computed in the run's dtype (f32 or f64). transformers itself
// takes cos/sin and the RMSNorm statistics in f32 even in an f64 run; against qwen3vl-text-mini that choice
// is invisible (both land at ~3e-7, a floor set by the file's f32-rounded weights and outputs), so the f64
// path stays plain f64.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "io/safetensors.h"
#include "model/dit.h"

namespace h3 {

struct QwenTextConfig {
  // Defaults are Qwen3-VL-32B's text model (the H3 text encoder).
  int64_t vocab_size = 151936, hidden = 5120, intermediate = 25600, n_layers = 64;
  int64_t n_heads = 64, n_kv_heads = 8, head_dim = 128;
  double rms_eps = 1e-6, rope_theta = 5e6;
  std::array<int64_t, 3> mrope_section{24, 20, 20};  // frequencies given to the t, h and w position axes
  bool mrope_interleaved = true;                     // Qwen3-VL: t,h,w,t,h,w,... ; false: Qwen2-VL blocks

  // Reads a transformers config (flat, or with a "text_config" object); absent fields keep the defaults.
  // Accepts both "rope_parameters" and the older "rope_theta" + "rope_scaling".
  static QwenTextConfig from_json_text(const std::string& text, const std::string& where);
  std::string summary() const;
};

// Where the text decoder's tensors live in `f`: the prefix before "embed_tokens.weight" ("weight." in golden
// files, "model.language_model." in transformers checkpoints). Throws when there is none.
std::string qwen_text_prefix(const SafeTensors& f);
// The config of the decoder in `f`: sizes from the tensor shapes and layer count, the rest from the file's
// "config" metadata when present, else the defaults above. Logs nothing; throws on inconsistent shapes.
QwenTextConfig detect_qwen_text_config(const SafeTensors& f);

struct QwenTextOutputs {
  std::map<int64_t, Tensor> hidden_states;  // the requested indices only, each [N, hidden]
  Tensor last_normed;                       // final norm of the last layer's output, when requested
};

class QwenTextModel {
 public:
  // Loads the embeddings and decoder layers [0, n_layers) (all when n_layers < 0) from `f`, converted to the
  // compute dtype; loads the final norm only when every layer is loaded. Throws listing every missing or
  // mis-shaped key. Precision::bf16 is refused (the reference conditioner computes in f32).
  QwenTextModel(const SafeTensors& f, const QwenTextConfig& cfg, int64_t n_layers, Precision precision);

  const QwenTextConfig& config() const { return cfg_; }
  int64_t layers_loaded() const { return static_cast<int64_t>(layers_.size()); }
  DType dtype() const { return dtype_; }

  // Runs the layers needed for the requested hidden states (indices 0..layers_loaded()). `mrope_positions` is
  // [3 * N] (t row, then h, then w); null means text positions (every axis = token index).
  QwenTextOutputs forward(const std::vector<int32_t>& ids, const std::vector<int64_t>& keep, bool want_normed,
                          const std::vector<int64_t>* mrope_positions = nullptr) const;
  // hidden_states[k] (k = 50 is the H3 conditioning).
  Tensor hidden_state(const std::vector<int32_t>& ids, int64_t k) const;

 private:
  struct Layer {
    Tensor in_norm, q, k, v, o, q_norm, k_norm, post_norm, up_gate, down;  // up_gate = [up; gate] rows
  };
  QwenTextConfig cfg_;
  DType dtype_;
  Tensor embed_, final_norm_;
  std::vector<Layer> layers_;
};


}  // namespace h3

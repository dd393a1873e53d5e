// The Qwen3-VL vision encoder on the CPU in f32 or f64 (transformers' Qwen3VLVisionModel):
//
//   pixel rows [N, C*tp*p*p]  --patch embed (the stride = kernel Conv3d, i.e. one GEMM)-->  [N, hidden]
//   + learned position embeddings: a g x g table (g = sqrt(num_position_embeddings)) bilinearly sampled at each
//     image's h x w patch grid (align-corners linspace, f32 weights), the same for every temporal group
//   -> depth x { x += attn(LN1(x)); x += fc2(gelu_tanh(fc1(LN2(x)))) }   (LayerNorm eps 1e-6)
//        attention: bidirectional, one sequence per temporal group of each image/video (transformers'
//        cu_seqlens = cumsum(repeat_interleave(h*w, t))), 2-D rotary embedding: head_dim/4 frequencies
//        (theta 1e4 over head_dim/2) of the patch row, then head_dim/4 of the patch column, rotate-half over
//        the whole head
//   -> merger: LN(hidden) per patch, then each 2x2 block of patches as one row [N/4, 4*hidden] ->
//      fc1 -> gelu (erf) -> fc2 -> [N/4, out_hidden]   (the LM width)
//   DeepStack: after block deepstack_indexes[k], merger k (LayerNorm over the 4*hidden row instead) gives the
//   features added to the LM hidden state at the vision rows after decoder layer k.
//
// Row order (the processor's and every output's): per image, per temporal group t, per merged block (bh, bw),
// per patch inside the block (mh, mw): patch row = bh*m + mh, column = bw*m + mw. So rows 4j..4j+3 form merged
// token j and the merge is a reshape.
//
// Precision flow: inv_freq and the position-embedding interpolation weights are computed in f32 as in the
// reference; products, cos/sin and everything else in the run's dtype. (transformers' own f64 run rotates q/k in
// f32, a ~1e-7 relative floor.)
//
// Devices: the CPU runs f32 or f64; the GPU runs f32 or bf16. bf16 is transformers' bf16 model: bf16 weights and
// activations, GEMMs (the patch embedding included) accumulating in f32 with the bias added before the one rounding,
// LayerNorm statistics in f32, the position embeddings as bf16 products of the table and the bf16-rounded bilinear
// weights summed in bf16 steps, q/k rotated in f32 with f32 cos/sin and rounded once, GELU in f32 rounded once,
// residual adds rounded. The position embeddings and rotary tables are computed on the host (small), the rest on
// the device; outputs are device tensors then.
//
// Device memory: the tower stays resident, never streamed by layer as the text tower can be (text.h,
// Qwen3VlTextOptions::resident_layers). At the released sizes it holds 595.3 M parameters (27 blocks of 15.24 M,
// the merger and its three DeepStack copies 179.4 M, patch embedding and position table 4.4 M): 1.11 GiB in bf16,
// the GPU's production precision (2.22 GiB in f32), next to the text tower's 46.9 GiB, and loaded only for requests
// with pictures or videos: streaming it would save at most 1.1 GiB of a phase that streams the text tower anyway.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/safetensors.h"
#include "model/qwen3vl/weights.h"

namespace h3 {

struct Qwen3VlVisionConfig {
  // Defaults are Qwen3-VL-32B's vision tower (H3's text encoder).
  int64_t depth = 27, hidden = 1152, intermediate = 4304, n_heads = 16, in_channels = 3;
  int64_t patch = 16, temporal_patch = 2, merge = 2, out_hidden = 5120, n_pos = 2304;
  std::vector<int64_t> deepstack_indexes{8, 16, 24};
  double ln_eps = 1e-6, rope_theta = 10000.0;

  int64_t head_dim() const { return hidden / n_heads; }
  int64_t patch_dim() const { return in_channels * temporal_patch * patch * patch; }
  // Reads a transformers config (a "vision_config" object, or a flat vision config); absent fields keep the
  // defaults. Refuses activations other than gelu_pytorch_tanh.
  static Qwen3VlVisionConfig from_json_text(const std::string& text, const std::string& where);
  std::string summary() const;
};

// A (t, h, w) patch grid as in image_grid_thw / video_grid_thw.
using GridThw = std::array<int64_t, 3>;

// Where the vision tower's tensors live in `f` (the prefix before "patch_embed.proj.weight"): "weight.visual." in
// golden files, "model.visual." or "visual." in checkpoints. Throws when there is none.
std::string qwen3vl_vision_prefix(const SafeTensors& f);
std::string qwen3vl_vision_prefix(const Qwen3VlTextWeights& w);
// Whether `f` (`w`: a text-encoder source, file or transformers folder) holds a vision tower at all.
bool has_qwen3vl_vision(const SafeTensors& f);
bool has_qwen3vl_vision(const Qwen3VlTextWeights& w);
// Sizes from the tensor shapes, the head count and DeepStack layers from the file's "config" metadata when
// present (else the defaults). Throws on inconsistent shapes.
Qwen3VlVisionConfig detect_qwen3vl_vision_config(const SafeTensors& f);
Qwen3VlVisionConfig detect_qwen3vl_vision_config(const Qwen3VlTextWeights& w);  // config from its config.json

struct Qwen3VlVisionOptions {
  Precision precision = Precision::f32;  // f32; f64 on the CPU only; bf16 on the GPU only
  Device device = Device::cpu;
};

struct Qwen3VlVisionOutputs {
  Tensor embeds;                  // [N/m^2, out_hidden], the merger's output
  std::vector<Tensor> deepstack;  // one [N/m^2, out_hidden] per DeepStack index
  std::vector<Tensor> block_out;  // [N, hidden] after each block, when requested
};

class Qwen3VlVisionModel {
 public:
  // Loads every tensor of the tower under qwen3vl_vision_prefix(f), in the compute dtype on the options' device
  // (converted where it lands). Throws listing every missing or mis-shaped key, or for a precision the device does
  // not run.
  Qwen3VlVisionModel(const SafeTensors& f, const Qwen3VlVisionConfig& cfg, Precision precision);
  // The same from a text-encoder source (one file, a sharded transformers folder: only the shards holding the
  // tower are mapped, or procedural weights).
  Qwen3VlVisionModel(const Qwen3VlTextWeights& w, const Qwen3VlVisionConfig& cfg, Precision precision);
  Qwen3VlVisionModel(const Qwen3VlTextWeights& w, const Qwen3VlVisionConfig& cfg, const Qwen3VlVisionOptions& opt);

  const Qwen3VlVisionConfig& config() const { return cfg_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Bytes of weights on the model's device.
  size_t bytes() const { return bytes_; }

  // pixels [sum of t*h*w over grids, patch_dim] in the row order above (any float dtype, host or device; converted),
  // one grid per image or video. Throws when the rows and grids disagree or h, w are not multiples of the merge
  // size. Outputs are on the model's device.
  Qwen3VlVisionOutputs forward(const Tensor& pixels, const std::vector<GridThw>& grids, bool keep_blocks = false) const;

  // The pieces, exposed for tests: position embeddings [N, hidden] (host, the compute dtype; bf16 runs as the
  // reference forms them in bf16) and rotary cos/sin [N, head_dim] in row order (host; f32 for bf16 runs, whose
  // rotation is in f32).
  Tensor position_embeddings(const std::vector<GridThw>& grids) const;
  std::pair<Tensor, Tensor> rotary_tables(const std::vector<GridThw>& grids) const;

 private:
  struct Block {
    Tensor n1_w, n1_b, qkv_w, qkv_b, proj_w, proj_b, n2_w, n2_b, fc1_w, fc1_b, fc2_w, fc2_b;
  };
  struct Merger {
    Tensor norm_w, norm_b, fc1_w, fc1_b, fc2_w, fc2_b;
    bool post_shuffle_norm = false;
  };
  Tensor merge(const Merger& m, const Tensor& x) const;
  void load(const Qwen3VlTextWeights& f, const Qwen3VlVisionOptions& opt);  // the constructors' body

  Qwen3VlVisionConfig cfg_;
  DType dtype_;
  Device device_ = Device::cpu;
  size_t bytes_ = 0;
  Tensor patch_w_, patch_b_;
  Tensor pos_table_;  // host: the table's values in the compute dtype (bf16 runs: bf16 values held in f32)
  std::vector<Block> blocks_;
  Merger merger_;
  std::vector<Merger> deepstack_;
};

}  // namespace h3

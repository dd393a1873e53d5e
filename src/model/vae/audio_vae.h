// The MiniMax-H3 audio VAE (h3-model-spec §7; diffusers AutoencoderKLMiniMaxH3Audio): a BigVGAN decoder with
// anti-aliased SnakeBeta activations and a DAC encoder with the causal-attention projection to the latent width.
// Mono: the two stereo channels travel as two batch items. All ops run in the requested precision (f32 or f64).
#pragma once
#include <string>
#include <vector>

#include "core/dtype.h"
#include "io/device_loader.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"

namespace h3 {

class VaeWeightReader;  // model/vae/weights.h

struct AudioVaeConfig {
  int64_t encoder_dim = 64;
  std::vector<int64_t> encoder_rates{2, 4, 4, 5, 5};
  int64_t latent_dim = 2048;
  int64_t latent_channels = 32;
  int64_t num_attention_heads = 8;
  int64_t decoder_dim = 1024;
  std::vector<int64_t> decoder_rates{5, 5, 2, 2, 2, 2, 2};
  std::vector<int64_t> decoder_kernel_sizes{9, 9, 4, 4, 4, 4, 4};
  std::vector<int64_t> resblock_kernel_sizes{3, 7, 11};
  std::vector<std::vector<int64_t>> resblock_dilation_sizes{{1, 3, 5}, {1, 3, 5}, {1, 3, 5}};
  int64_t sampling_rate = 32000;
  // Per-channel latent normalisation (encode (z - mean) / std, decode z * std + mean); empty = identity.
  std::vector<double> latents_mean, latents_std;

  int64_t hop() const;  // samples per latent = prod(encoder_rates) = prod(decoder_rates)
  // Parses the diffusers config JSON (missing keys keep the released defaults); `where` names errors.
  static AudioVaeConfig from_json_text(const std::string& text, const std::string& where);
  std::string summary() const;
  void validate(const std::string& where) const;
};

// The GPU activations one batch item of `frames` latent frames needs in the decoder: the widest stage (channels x
// samples) of the upsampling stack, in f32, times the 16 buffers an anti-aliased AMP block keeps alive (its input,
// the x2-upsampled activation, three resblock branches, the sum, the allocator's rounding). At the released sizes
// (decoder_dim 1024, rates 5 5 2 2 2 2 2) the widest stages hold 6400 x frames values: 85 MB for a 5 s clip (208
// latent frames).
int64_t audio_decoder_item_bytes(const AudioVaeConfig& c, int64_t frames);

class AudioVae {
 public:
  // Loads the weights stored under `prefix` ("weight." in golden files, "" in a diffusers checkpoint) and converts
  // them to the compute dtype; weight-normalised convolutions are folded (w = g v / ||v||) once here. Throws
  // listing every missing or mis-shaped key. device cuda: the decoder's weights are uploaded once and decode runs
  // on the GPU in f32 (precision f32, or bf16, which the GPU also runs in f32: the decoder is small and its convs
  // are not GEMM-bound); decode still takes and returns host tensors, and the encoder stays on the CPU.
  // The weights come from a file, a sharded checkpoint folder (io/weight_files.h) or procedural weights.
  AudioVae(const TensorSource& f, const std::string& prefix, const AudioVaeConfig& cfg, Precision precision,
           Device device = Device::cpu);
  AudioVae(const SafeTensors& f, const std::string& prefix, const AudioVaeConfig& cfg, Precision precision,
           Device device = Device::cpu);
  // How the weights were read (on the host; the decoder is then copied to the GPU for a GPU VAE).
  const LoadReport& load_report() const { return load_report_; }

  // latents [B, latent_channels, A] (already de-normalised) -> waveform [B, 1, A * hop] clamped to [-1, 1].
  // The items go max_items per call (0: as many as fit in the room left under the GPU's memory budget,
  // audio_decoder_item_bytes each; all of them on the CPU); a GPU that has not the room for one item refuses, naming
  // both. Each item is decoded independently of the others: on the CPU (whose GEMM order never depends on the row
  // count) and in deterministic mode on the GPU the waveform is bitwise the same however the items are split; else
  // the split GEMMs may choose other cuBLASLt algorithms and differ in the last bits, as across the ranks of
  // decode_audio_sharded.
  Tensor decode(const Tensor& latents, int64_t max_items = 0) const;
  // waveform [B, 1, N] -> posterior mean [B, latent_channels, ceil(N / hop)] (right-padded with zeros).
  Tensor encode_mean(const Tensor& waveform) const;
  // z * std + mean and (z - mean) / std per channel on [B, C, A] (identity when the config has no statistics).
  Tensor denormalize(const Tensor& z) const;
  Tensor normalize(const Tensor& z) const;

  const AudioVaeConfig& config() const { return cfg_; }
  DType compute_dtype() const { return ct_; }
  Device device() const { return dev_; }
  bool has_encoder() const { return has_encoder_; }

 private:
  struct Act {  // anti-aliased SnakeBeta: upsample x2, SnakeBeta, downsample x2
    Tensor alpha, beta, up_filter, down_filter;
  };
  struct AmpBlock {
    int64_t kernel = 0;
    std::vector<int64_t> dilations;
    std::vector<Tensor> w1, b1, w2, b2;
    std::vector<Act> acts;  // 2 per dilation: [act1, act2]
  };
  struct ResUnit {
    int64_t dilation = 1;
    Tensor alpha1, w1, b1, alpha2, w2, b2;
  };
  struct EncBlock {
    int64_t stride = 1;
    std::vector<ResUnit> units;
    Tensor alpha, w, b;
  };

  Tensor activation(const Act& a, const Tensor& x) const;
  Tensor amp_block(const AmpBlock& blk, const Tensor& x) const;
  Tensor residual_unit(const ResUnit& u, const Tensor& x) const;
  Tensor pre_block(const Tensor& rows) const;        // [T, latent_dim] -> [T, latent_channels]
  Tensor decode_items(const Tensor& latents) const;  // decode() of these items in one call

  void upload_decoder();  // moves the decoder's weights to dev_ (constructor)
  // The constructor's reads: the decoder, the optional encoder and its pre-block, and one anti-aliased activation
  // (`path` names the file in errors).
  void load_decoder(VaeWeightReader& r, const std::string& path);
  void load_encoder(VaeWeightReader& r);
  static Act read_act(VaeWeightReader& r, const std::string& name, int64_t channels, const std::string& path);

  AudioVaeConfig cfg_;
  DType ct_;
  Device dev_ = Device::cpu;
  LoadReport load_report_;
  bool has_encoder_ = false;
  Tensor lat_mean_, lat_std_;
  // decoder
  Tensor dec_in_w_, dec_in_b_, conv_pre_w_, conv_pre_b_, conv_post_w_;
  std::vector<Tensor> ups_w_, ups_b_;
  std::vector<AmpBlock> resblocks_;
  Act act_post_;
  // encoder
  Tensor enc_in_w_, enc_in_b_, enc_alpha_, enc_out_w_, enc_out_b_;
  std::vector<EncBlock> enc_blocks_;
  Tensor n1_w_, n1_b_, n2_w_, n2_b_, n3_w_, n3_b_, qkv_w_, qkv_b_, attn_proj_w_, attn_proj_b_, proj_w_, proj_b_;
  Tensor mlp_norm_w_, mlp_norm_b_, w0_w_, w0_b_, w1_w_, w1_b_, w2_w_, w2_b_, mean_w_, mean_b_;
};

}  // namespace h3

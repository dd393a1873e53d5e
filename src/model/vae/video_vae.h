// The MiniMax-H3 video VAE (h3-model-spec §6; diffusers AutoencoderKLMiniMaxH3): a causal 3D-CNN encoder and a
// ViT decoder, with the released temporal chunking and spatial tiling.
//
// Decode is split into explicit work units so that it can be spread over ranks and still be bitwise identical to
// the 1-rank result: plan_decode() lists the (temporal chunk, spatial tile) units, decode_unit() decodes one unit
// independently of all others, and stitch() blends the decoded units in a fixed order. decode() = all three.
//
// Index equations (T latent frames, h x w latent grid, spatial ratio r, temporal ratio q):
//   chunk i covers padded latent frames [i*n, i*n + n + o) with n = ceil(clip/q), o = (-token_drop) mod n;
//   tile (a, b) covers latent rows [ys_a/r, (ys_a + tile_h)/r) and cols [xs_b/r, (xs_b + tile_w)/r) (clamped),
//   where ys/xs are the pixel starts of split_tiles(); unit index u = (i * rows + a) * cols + b.
#pragma once
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "core/dtype.h"
#include "io/device_loader.h"
#include "io/safetensors.h"
#include "io/tensor_source.h"
#include "ops/layout.h"

namespace h3 {

class VaeWeightReader;  // model/vae/weights.h

struct VideoVaeConfig {
  int64_t in_channels = 3, out_channels = 3, latent_channels = 24;
  std::vector<int64_t> block_out_channels{128, 256, 256, 512, 512, 1024};
  int64_t layers_per_block = 2;
  std::vector<int64_t> spatial_downsample_factors{2, 2, 2, 2, 1, 1};
  std::vector<int64_t> temporal_downsample_factors{1, 2, 2, 1, 1, 1};
  int64_t norm_num_groups = 32;
  double norm_eps = 1e-6;
  std::string spatial_padding_mode = "reflect";
  int64_t decoder_num_layers = 36, decoder_num_attention_heads = 32, decoder_attention_head_dim = 64;
  int64_t decoder_num_register_tokens = 4, decoder_ffn_mult = 4;
  double decoder_rope_theta = 100.0, decoder_rope_dim_ratio = 0.75, decoder_norm_eps = 1e-5;
  int64_t clip_length = 17, token_drop = 3;
  std::vector<double> latents_mean, latents_std;  // empty = identity
  // Spatial tiling (pixels); on by default as released.
  bool tiling = true;
  int64_t tile_height = 256, tile_width = 256, tile_overlap_height = 64, tile_overlap_width = 64;

  int64_t spatial_ratio() const;   // prod(spatial_downsample_factors)
  int64_t temporal_ratio() const;  // prod(temporal_downsample_factors)
  int64_t decoder_dim() const { return decoder_num_attention_heads * decoder_attention_head_dim; }
  int64_t rope_dim() const;  // int(head_dim * rope_dim_ratio)
  // The diffusers config JSON plus the optional tiling JSON (tile_sample_min_height, ..._overlap_width).
  static VideoVaeConfig from_json_text(const std::string& config, const std::string& tiling, const std::string& where);
  void validate(const std::string& where) const;
  std::string summary() const;
};

// Tiles of `tile` pixels over `length` (spec §6.4): the fewest tiles with every overlap >= min_overlap, the slack
// spread round-robin over the overlaps in `ratio`-pixel steps. One tile [0, length) when tile >= length.
struct TileAxis {
  std::vector<int64_t> starts, lengths, overlaps;  // overlaps[i] is between tile i and i+1
};
TileAxis split_tiles(int64_t length, int64_t tile, int64_t min_overlap, int64_t ratio);

// Temporal chunking of the decode (spec §6.5).
struct TemporalChunkPlan {
  int64_t latent_frames = 0;          // T requested
  int64_t pad_tokens = 0;             // latent frames appended by repeating the last one
  int64_t chunk_tokens = 0;           // n = ceil(clip / q): chunk stride in latent frames
  int64_t token_overlap = 0;          // o: extra latent frames each chunk decodes past its stride
  int64_t frame_pre_padding = 0;      // leading pixel frames dropped from each part
  int64_t frame_overlap = 0;          // pixel frames cross-faded between consecutive chunks
  int64_t chunk_frames = 0;           // n * q pixel frames per part
  int64_t trim_frames = 0;            // trailing pixel frames dropped at the end (produced by padding)
  int64_t out_frames = 0;             // final pixel frames
  std::vector<int64_t> starts;        // first (padded) latent frame of every chunk
  int64_t chunk_len(size_t i) const;  // latent frames chunk i decodes (n + o, clamped to the padded length)
};
TemporalChunkPlan plan_temporal_chunks(int64_t latent_frames, int64_t clip_length, int64_t token_drop,
                                       int64_t temporal_ratio);

struct VideoDecodeUnit {
  int64_t index = 0, chunk = 0, tile_row = 0, tile_col = 0;
  int64_t t0 = 0, t1 = 0;  // padded latent frames [t0, t1)
  int64_t y0 = 0, y1 = 0;  // latent rows
  int64_t x0 = 0, x1 = 0;  // latent cols
};

struct VideoDecodePlan {
  int64_t latent_frames = 0, latent_height = 0, latent_width = 0;
  TemporalChunkPlan time;
  TileAxis rows, cols;  // in pixels
  std::vector<VideoDecodeUnit> units;
};

// The stitch's output frames grouped by the temporal chunk after whose decode they are final: schedule[i] lists, in
// output order, frames of chunk i's tiles (the first part cross-fading from chunk i-1's overlap part; the last chunk
// also its own overlap part). Concatenated over i they are the whole video (trim applied), frame for frame what
// VideoVae::stitch produces; ops::stitch_frames evaluates them.
std::vector<std::vector<ops::StitchFrame>> frame_schedule(const VideoDecodePlan& plan, bool two_parts);
ops::StitchGrid stitch_grid(const VideoDecodePlan& plan);

// Fills plan.units with every (temporal chunk, tile row, tile column) of a plan whose time, rows and cols are set;
// r is the spatial ratio (pixels per latent). Unit index = (chunk * rows + row) * cols + col.
void add_decode_units(VideoDecodePlan& plan, int64_t spatial_ratio);

// VideoVae::plan_decode and VideoVae::decoder_unit_bytes of a VAE with config `c` (no weights needed: memory plans).
VideoDecodePlan video_decode_plan(const VideoVaeConfig& c, const Shape& latent_shape);
int64_t video_decoder_unit_bytes(const VideoVaeConfig& c, Precision p, int64_t t, int64_t h, int64_t w);

class VideoVae {
 public:
  // Loads the weights under `prefix` ("weight." in golden files, "" in a diffusers checkpoint) in the compute
  // dtype. The encoder is optional (decode-only files); every missing or mis-shaped key is reported at once.
  // device cuda: the ViT decoder's weights are uploaded once and decode_block runs on the GPU (precision f32, or
  // bf16 = the big block GEMMs, attention and FFN in bf16 with the residual stream, norms, proj_in and proj_out in
  // f32); decode_unit and decode still return host f32 tensors, and the encoder stays on the CPU (f32).
  // The weights come from a file, a sharded checkpoint folder (io/weight_files.h) or procedural weights; a GPU
  // VAE's decoder weights go straight to the device in their layer's dtype (io/device_loader.h).
  VideoVae(const TensorSource& f, const std::string& prefix, const VideoVaeConfig& cfg, Precision precision,
           Device device = Device::cpu);
  VideoVae(const SafeTensors& f, const std::string& prefix, const VideoVaeConfig& cfg, Precision precision,
           Device device = Device::cpu);

  // z * std + mean and (z - mean) / std per channel on [C, T, h, w] (identity without statistics).
  Tensor denormalize(const Tensor& z) const;
  Tensor normalize(const Tensor& z) const;

  // Decode of de-normalised latents [latent_channels, T, h, w] -> [out_channels, frames, 16h, 16w] in the
  // decoder's (ImageNet-normalised) pixel space.
  Tensor decode(const Tensor& z) const;
  VideoDecodePlan plan_decode(const Shape& latent_shape) const;
  // z with the plan's trailing latent frames appended (compute dtype); decode_unit reads from it.
  Tensor pad_latents(const Tensor& z, const VideoDecodePlan& plan) const;
  // One unit: [out_channels, q * (t1 - t0), r * (y1 - y0), r * (x1 - x0)], a host tensor of compute_dtype().
  Tensor decode_unit(const Tensor& z_padded, const VideoDecodeUnit& unit) const;
  // The same unit left where decode_block computed it (GPU memory for a GPU VAE; benchmarks time this).
  Tensor decode_unit_on_device(const Tensor& z_padded, const VideoDecodeUnit& unit) const;
  // Blends decoded units (indexed like plan.units) into the video, in the reference's order.
  Tensor stitch(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded) const;

  // stitch() on the VAE's device: the units (host or device tensors) are moved there a chunk row at a time and
  // stitched by ops::stitch_frames into one host clip; bitwise stitch(). The sharded decode's gathered units take
  // this path on a GPU VAE.
  Tensor stitch_on_device(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded) const;

  // Finished frames: sink(first, frames) receives video frames [first, first + n) as a host tensor
  // [out_channels, n, H, W] of compute_dtype(); calls come in frame order and cover the video once.
  using FrameSink = std::function<void(int64_t first, const Tensor& frames)>;
  // stitch() frame by frame: frame_schedule() through ops::stitch_frames on the units' device (the GPU for a GPU
  // VAE), emitted after each chunk; bitwise the same values as stitch().
  void stitch_streaming(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded, const FrameSink& sink) const;
  // decode(z) without holding the clip: chunk by chunk, the chunk's units are decoded (stacked, max_batch per ViT
  // call, 0 = chosen by memory) and stay on the VAE's device with the previous chunk's; the frames they finish are
  // stitched there, downloaded and handed to sink; the previous chunk's units are then released. Bitwise the same
  // frames as decode(). decode() on a GPU VAE is this, collected.
  void decode_streaming(const Tensor& z, const FrameSink& sink, int64_t max_batch = 0) const;
  // The same, with the frames left on the VAE's device (sink gets GPU tensors on a GPU VAE): the caller downloads
  // them where it wants them (decode() copies each channel's frames straight into its host clip).
  void decode_streaming_on_device(const Tensor& z, const FrameSink& sink, int64_t max_batch = 0) const;
  // Units decoded stacked: consecutive units of one latent shape go max_batch at a time (0 = batch_size()) through
  // decode_blocks; results left on the VAE's device, in the order given.
  std::vector<Tensor> decode_units_on_device(const Tensor& z_padded, const std::vector<VideoDecodeUnit>& units,
                                             int64_t max_batch = 0) const;
  // The ViT decoder on latent blocks of one shape at once: their tokens are stacked into one [k * N, D] matrix for
  // every linear and row-wise layer, attention stays per block (ops::attention_blocks). Element i is bitwise
  // decode_block(blocks[i]): the CPU GEMM's order never depends on the row count, and on the GPU the GEMMs run
  // under ops::PinnedGemms (one algorithm per weight shape).
  std::vector<Tensor> decode_blocks(const std::vector<Tensor>& blocks) const;
  // Units of this latent shape per stacked call: the activation bytes of one unit (decoder_unit_bytes) against half
  // the room left under the GPU's memory budget, at most a quarter of its memory (2 GiB on the CPU), at most
  // kMaxDecodeBatch, at least 1; a GPU whose room cannot hold one unit refuses, naming both (model/vae/decode_room.h).
  int64_t batch_size(int64_t t, int64_t h, int64_t w) const;
  int64_t decoder_unit_bytes(int64_t t, int64_t h, int64_t w) const;
  static constexpr int64_t kMaxDecodeBatch = 32;
  // The ViT decoder on one latent block [latent_channels, t, h, w] (post_quant_conv included, no tiling); the
  // result lives on the VAE's device.
  Tensor decode_block(const Tensor& z) const;

  // ImageNet-normalised pixels [in_channels, frames, H, W] -> posterior mean [latent_channels, T, H/r, W/r]
  // (not normalised), with 17-frame clips and spatial tiling.
  Tensor encode_mean(const Tensor& pixels) const;
  // The encoder + quant_conv on one clip/tile -> moments [2 * latent_channels, t, h, w].
  Tensor encode_block(const Tensor& x) const;

  // clamp(x * imagenet_std + imagenet_mean, 0, 1) per RGB channel of [3, ...].
  static Tensor to_pixels01(const Tensor& decoded);

  const VideoVaeConfig& config() const { return cfg_; }
  // The dtype of decode_unit's and decode's results (f32 for a GPU VAE in either precision).
  DType compute_dtype() const { return ct_; }
  Precision precision() const { return precision_; }
  Device device() const { return dev_; }
  bool has_encoder() const { return has_encoder_; }
  // How the weights were loaded (the decoder's device load on a GPU VAE, else the host reads).
  const LoadReport& load_report() const { return load_report_; }

  struct Block {
    Tensor norm1, to_q, q_b, to_k, k_b, to_v, v_b, to_out, out_b, scale1, norm2, ff_in, ff_in_b, ff_out, ff_out_b,
        scale2;
  };
  struct Resnet {
    Tensor n1_w, n1_b, c1_w, c1_b, n2_w, n2_b, c2_w, c2_b, sc_w, sc_b;  // sc_* undefined without a shortcut
  };
  struct Level {
    std::vector<Resnet> resnets;
    Tensor down_w, down_b;  // undefined without a downsampler
    int64_t ts = 1, ss = 1;
  };

 private:
  Tensor resnet(const Resnet& r, const Tensor& x) const;
  Tensor causal_conv(const Tensor& x, const Tensor& w, const Tensor& b, int64_t spatial_pad) const;
  Tensor encode_clip(const Tensor& x) const;  // spatially tiled moments of one clip
  void rope_tables(int64_t t, int64_t h, int64_t w, Tensor& cos, Tensor& sin) const;
  // The tables for a block of t x h x w latents on the VAE's device in `dt` (cached on the GPU: units share shapes).
  // k copies stacked: [k * N, rope_dim].
  void rope_tables_for(int64_t t, int64_t h, int64_t w, int64_t k, DType dt, Tensor& cos, Tensor& sin) const;
  Tensor decode_into_clip(const Tensor& z) const;  // decode() of a GPU VAE: streamed into one host clip
  void load_encoder(VaeWeightReader& r);           // the encoder's weights, on the host (constructor)
  // decode_blocks' residual stream x [K * N, D] for K blocks of [C, t, h, w] latents (N = t*h*w + registers + 1): each
  // block's voxels (transposed to rows on the host) through post_quant_conv and proj_in, then the registers and one
  // zero row, block i at rows [i * N, (i + 1) * N).
  Tensor embed_blocks(const std::vector<Tensor>& blocks, int64_t rows_per_block) const;

  VideoVaeConfig cfg_;
  DType ct_;
  Precision precision_ = Precision::f32;
  Device dev_ = Device::cpu;
  Tensor qk_ones_;  // [head_dim] ones: the non-affine q/k norm through the fused GPU qk_norm_rope
  mutable std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, std::pair<Tensor, Tensor>> rope_cache_;
  mutable std::mutex rope_mu_;
  bool has_encoder_ = false;
  LoadReport load_report_;
  Tensor lat_mean_, lat_std_;
  // decoder
  Tensor pq_w_, pq_b_, proj_in_w_, proj_in_b_, registers_, norm_out_w_, norm_out_b_, proj_out_w_, proj_out_b_;
  std::vector<Block> blocks_;
  // encoder
  Tensor conv_in_w_, conv_in_b_, norm_out_enc_w_, norm_out_enc_b_, conv_out_w_, conv_out_b_, quant_w_, quant_b_;
  std::vector<Level> levels_;
};

}  // namespace h3

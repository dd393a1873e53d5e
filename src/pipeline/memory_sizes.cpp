#include "pipeline/memory_sizes.h"

#include <string>

#include "distributed/partition.h"
#include "model/dit/fp8_layers.h"
#include "model/vae/procedural.h"

namespace h3 {

namespace {

// The caching allocator's slack and the libraries' workspaces beside a phase's live tensors: cuBLASLt's 64 MiB, cuDNN
// plans, RoPE / AdaLN / index tables, algorithm tuning. 1 GiB covers the difference between the DiT's measured peaks
// and its live set at both resolutions (docs/notes.md, the H200 peaks in memory_sizes.h).
constexpr int64_t kPhaseFixed = kGiB;

int64_t element_bytes(Precision p) {
  return p == Precision::f64 ? 8 : p == Precision::f32 ? 4 : 2;
}

bool starts_with(const std::string& s, const char* p) {
  return s.rfind(p, 0) == 0;
}
bool ends_with(const std::string& s, const char* p) {
  const size_t n = std::char_traits<char>::length(p);
  return s.size() >= n && s.compare(s.size() - n, n, p) == 0;
}

}  // namespace

DitBytes dit_bytes(const DitConfig& c, Precision p, DistMode mode, int K, int U) {
  const int heads = c.num_attention_heads;
  const int64_t H = c.hidden_size, F = c.ffn_dim;
  // Rank 0 holds the largest slices (the partition rule gives the remainder to the first ranks).
  const Range heads_out = K > 1 ? part_of(heads, K, 0) : Range{0, heads};
  const Range heads_qkv = mode == DistMode::ulysses_ag ? part_of(heads, U, 0) : heads_out;
  const Range ffn = K > 1 ? part_of(F, K, 0) : Range{0, F};
  const Range ada = K > 1 ? part_of(18 * H, K, 0) : Range{0, 18 * H};
  const DitFp8Layers fp8 = p == Precision::fp8 ? dit_fp8_layers(c, mode, K, U) : DitFp8Layers{};
  const int64_t es = element_bytes(p);
  DitBytes out;
  out.blocks = c.num_layers;
  for (const auto& [key, shape] : c.parameters()) {
    const int64_t n = shape_numel(shape), rows = shape[0];
    // The released f32 layers: patch projections, time MLP, output heads.
    if (starts_with(key, "proj_in.") || starts_with(key, "audio_proj_in.") || starts_with(key, "time_embedder.") ||
        starts_with(key, "proj_out.") || starts_with(key, "audio_proj_out.")) {
      out.base += n * 4;
      continue;
    }
    if (!starts_with(key, "transformer_blocks.")) {  // refiner, norms, context embedder, final layer: bf16
      out.base += n * es;
      continue;
    }
    if (!starts_with(key, "transformer_blocks.0.")) continue;  // every block is block 0's size
    // A block GEMM weight: its rank's slice, one byte a value in FP8 (plus one f32 scale a row of the slice at
    // most). q / k / v and the MLP's first projection are split by rows, the output projections by columns.
    auto gemm = [&](int64_t kept, int64_t whole, bool in_fp8, bool by_rows) {
      const int64_t part = n / whole * kept, slice_rows = by_rows ? rows / whole * kept : rows;
      return in_fp8 ? part + 4 * slice_rows : part * es;
    };
    if (ends_with(key, "attn.to_q.weight") || ends_with(key, "attn.to_k.weight") || ends_with(key, "attn.to_v.weight"))
      out.block += gemm(heads_qkv.size(), heads, fp8.qkv, true);
    else if (ends_with(key, "attn.to_out.0.weight"))
      out.block += gemm(heads_out.size(), heads, fp8.out, false);
    else if (ends_with(key, "ff.net.0.proj.weight"))
      out.block += gemm(ffn.size(), F, fp8.ff_in, true);
    else if (ends_with(key, "ff.net.2.weight"))
      out.block += gemm(ffn.size(), F, fp8.ff_out, false);
    else if (ends_with(key, "adaln_proj.linear.weight") || ends_with(key, "adaln_proj.linear.bias"))
      out.block += n / (18 * H) * ada.size() * es;
    else
      out.block += n * es;
  }
  return out;
}

int64_t dit_weight_bytes(const DitConfig& c, Precision p, DistMode mode, int K, int U) {
  return dit_bytes(c, p, mode, K, U).total();
}

int64_t dit_activation_bytes(const DitConfig& c, Precision p, int64_t S, DistMode mode, int K, int U) {
  const int64_t H = c.hidden_size, I = c.inner_dim(), F = c.ffn_dim, world = int64_t{K} * U;
  const int64_t own = (S + world - 1) / world;
  const int64_t group = K > 1 ? K * own : own;  // rows a tensor-parallel rank projects
  const int64_t Ft = K > 1 ? (F + K - 1) / K : F;
  const bool fp8 = p == Precision::fp8;
  // The MLP's live set per projected row: the residual x before and after the fused residual pass, the pending MLP
  // output, the block output, the normed input (one byte in FP8), u = [N, 2F] bf16 and the SwiGLU output (FP8: one
  // byte). bf16 10H + 6F (139.8 KB a row at the released widths), FP8 9H + 5F (120.1 KB).
  const int64_t mlp_row = fp8 ? 9 * H + 5 * Ft : 10 * H + 6 * Ft;
  // Attention: the own rows' projections and the exchanged q, k, v and output of the rank's heads over all rows.
  const int64_t att = own * 2 * (4 * H + 3 * I) + (U > 1 || mode == DistMode::ulysses_ag ? 4 * S * (I / U) * 2 : 0);
  const int64_t live = std::max(group * mlp_row, att);
  // +10 % (the measured peaks sit 1-3 % above the live set and the fixed part) and 2 KB a row of inputs, outputs and
  // RoPE tables.
  return live + live / 10 + S * 2048 + kPhaseFixed;
}

TextBytes text_bytes(const Qwen3VlTextConfig& c, int64_t layers, Precision p, int tp) {
  const int64_t es = element_bytes(p), hidden = c.hidden, D = c.head_dim, G = c.n_kv_heads;
  const int64_t per_kv = c.n_heads / std::max<int64_t>(G, 1);
  int64_t per_layer = 2 * hidden + 2 * D;  // norms, replicated
  const Range units = tp > 1 ? part_of(G, static_cast<int>(std::min<int64_t>(tp, G)), 0) : Range{0, G};
  for (int64_t g = units.begin; g < units.end; ++g) {
    const int64_t Fg = part_of(c.intermediate, static_cast<int>(G), static_cast<int>(g)).size();
    per_layer += (per_kv * D + 2 * D) * hidden + hidden * per_kv * D + 3 * Fg * hidden;
  }
  return {c.vocab_size * hidden * es, per_layer * es, layers};
}

int64_t text_weight_bytes(const Qwen3VlTextConfig& c, int64_t layers, Precision p, int tp) {
  return text_bytes(c, layers, p, tp).total();
}

int64_t text_activation_bytes(const Qwen3VlTextConfig& c, Precision p, int64_t tokens) {
  const int64_t es = element_bytes(p), L = std::max<int64_t>(tokens, 1);
  // Per token: residual, normed input, partial sums, q, k, v, attention output, the MLP's [2I] and [I] (attention
  // keeps no scores: the GPU's causal kernel runs an online softmax).
  const int64_t row = 4 * c.hidden + 2 * c.n_heads * c.head_dim + 2 * c.n_kv_heads * c.head_dim + 3 * c.intermediate;
  return L * row * es + kPhaseFixed;
}

int64_t video_decoder_weight_bytes(const VideoVaeConfig& c, Precision p) {
  int64_t total = 0;
  for (const auto& [key, shape] : video_vae_decoder_parameters(c)) {
    // In bf16 the blocks' GEMM weights and biases are bf16; norms, LayerScale, registers, post_quant_conv, proj_in and
    // proj_out stay f32 (VideoVae::upload_decoder).
    const bool gemm = key.find(".attn.") != std::string::npos || key.find(".ff.") != std::string::npos ||
                      key.find(".to_") != std::string::npos;
    total += shape_numel(shape) * (p == Precision::bf16 && gemm ? 2 : 4);
  }
  return total;
}

int64_t VideoDecodeBytes::batch_for(int64_t stack_bytes) const {
  return std::clamp<int64_t>(stack_bytes / std::max<int64_t>(unit, 1), 0, max_batch);
}

VideoDecodeBytes video_decode_bytes(const VideoVaeConfig& c, Precision p, int64_t T, int64_t h, int64_t w) {
  const VideoDecodePlan plan = video_decode_plan(c, {c.latent_channels, T, h, w});
  const int64_t per_chunk = static_cast<int64_t>(plan.rows.starts.size() * plan.cols.starts.size());
  VideoDecodeBytes out;
  int64_t unit_out = 0;
  for (const VideoDecodeUnit& u : plan.units) {
    out.unit = std::max(out.unit, video_decoder_unit_bytes(c, p, u.t1 - u.t0, u.y1 - u.y0, u.x1 - u.x0));
    unit_out = std::max(unit_out, c.out_channels * c.temporal_ratio() * (u.t1 - u.t0) * c.spatial_ratio() *
                                      (u.y1 - u.y0) * c.spatial_ratio() * (u.x1 - u.x0) * 4);
  }
  // Units per stacked ViT call: at most 32 (VideoVae::kMaxDecodeBatch) and a chunk row's worth.
  out.max_batch = std::max<int64_t>(std::min<int64_t>(VideoVae::kMaxDecodeBatch, per_chunk), 1);
  // Two chunk rows of decoded units wait for the stitch; one chunk's finished frames; the padded latents.
  const int64_t frames = plan.time.chunk_frames * c.out_channels * h * c.spatial_ratio() * w * c.spatial_ratio() * 4;
  out.fixed = 2 * per_chunk * unit_out + frames + c.latent_channels * (T + 8) * h * w * 4 + kPhaseFixed;
  return out;
}

int64_t video_decode_activation_bytes(const VideoVaeConfig& c, Precision p, int64_t T, int64_t h, int64_t w,
                                      int64_t stack_bytes) {
  return video_decode_bytes(c, p, T, h, w).at(stack_bytes);
}

int64_t audio_decoder_weight_bytes(const AudioVaeConfig& c) {
  int64_t total = 0;
  for (const auto& [key, shape] : audio_vae_decoder_parameters(c)) total += shape_numel(shape) * 4;  // f32 on the GPU
  return total;
}

int64_t audio_decode_activation_bytes(const AudioVaeConfig& c, int64_t A) {
  // The widest stage (channels x samples) of the upsampling stack, for both stereo channels, times the buffers an
  // anti-aliased AMP block keeps alive (its input, the x2-upsampled activation, three resblock branches, the sum).
  int64_t widest = c.decoder_dim * A, len = A, ch = c.decoder_dim;
  for (int64_t r : c.decoder_rates) {
    len *= r;
    ch = std::max<int64_t>(ch / 2, 1);
    widest = std::max(widest, ch * len);
  }
  return 2 * widest * 4 * 16 + kPhaseFixed;
}

double h200_dit_forward_seconds(const DitConfig& c, Precision p, int64_t S, int K, int U) {
  if (!(c == *DitConfig::named("full")) || (p != Precision::bf16 && p != Precision::fp8) || S <= 0) return 0;
  // The measured points (S, seconds): 480p and 768p at 124 frames.
  constexpr double S1 = 14908, S2 = 37830;
  const double t1 = p == Precision::fp8 ? 0.84 : 1.38, t2 = p == Precision::fp8 ? 3.38 : 5.34;
  const double b = (t2 / S2 - t1 / S1) / (S2 - S1), a = t1 / S1 - b * S1;
  const double s = static_cast<double>(S);
  return (a * s + b * s * s) / std::max(1, K * U);
}

}  // namespace h3

// Video VAE: configuration, weights, the tile/chunk plans, the decode work units and their stitch, and the
// chunked/tiled encode driver. The ViT decoder is in model/vae/video_decoder.cpp, the CNN encoder in
// model/vae/video_encoder.cpp, the streamed decode (frame schedule, stacked units, the device stitch) in
// model/vae/video_stream.cpp.
#include "model/vae/video_vae.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <numeric>

#include "core/json.h"
#include "core/json_limits.h"
#include "core/parallel.h"
#include "io/weight_files.h"
#include "model/vae/tiling.h"
#include "model/vae/weights.h"

namespace h3 {

namespace {

template <typename F>
auto dispatch(const Tensor& x, F f) {
  return x.dtype() == DType::f32 ? f(float{}) : f(double{});
}

int64_t product(const std::vector<int64_t>& v) {
  return std::accumulate(v.begin(), v.end(), int64_t{1}, std::multiplies<>());
}

// y[c, ...] = f(c, x[c, ...]) over the first dim.
template <typename F>
Tensor map_channels(const Tensor& x, F f) {
  Tensor y(x.dtype(), x.shape());
  const int64_t C = x.dim(0), per = x.numel() / std::max<int64_t>(C, 1);
  dispatch(x, [&]<typename T>(T) {
    const T* xp = x.data<T>();
    T* yp = y.data<T>();
    // Blocks of 64K values in parallel (values are independent): the decoder's frames go through here on the MP4
    // writer's thread, ~50 M values per 480p clip.
    constexpr int64_t kBlock = int64_t{1} << 16;
    const int64_t blocks = (per + kBlock - 1) / kBlock;
    parallel_for(C * blocks, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t c = b / blocks, i0 = (b % blocks) * kBlock, i1 = std::min(per, i0 + kBlock);
        for (int64_t i = i0; i < i1; ++i) yp[c * per + i] = f(c, xp[c * per + i]);
      }
    });
    return 0;
  });
  return y;
}

}  // namespace

int64_t VideoVaeConfig::spatial_ratio() const {
  return product(spatial_downsample_factors);
}
int64_t VideoVaeConfig::temporal_ratio() const {
  return product(temporal_downsample_factors);
}
int64_t VideoVaeConfig::rope_dim() const {
  return static_cast<int64_t>(static_cast<double>(decoder_attention_head_dim) * decoder_rope_dim_ratio);
}

VideoVaeConfig VideoVaeConfig::from_json_text(const std::string& config, const std::string& tiling,
                                              const std::string& where) {
  VideoVaeConfig c;
  auto parse = [&](const std::string& text, const char* what) {
    try {
      return parse_json_bounded(text, where + ": video VAE " + what);
    } catch (const nlohmann::json::exception& e) {
      fail("{}: video VAE {} is not valid JSON: {}", where, what, e.what());
    }
  };
  try {
    if (!config.empty()) {
      const nlohmann::json j = parse(config, "config");
      read_if(j, "in_channels", c.in_channels);
      read_if(j, "out_channels", c.out_channels);
      read_if(j, "latent_channels", c.latent_channels);
      read_if(j, "block_out_channels", c.block_out_channels);
      read_if(j, "layers_per_block", c.layers_per_block);
      read_if(j, "spatial_downsample_factors", c.spatial_downsample_factors);
      read_if(j, "temporal_downsample_factors", c.temporal_downsample_factors);
      read_if(j, "norm_num_groups", c.norm_num_groups);
      read_if(j, "norm_eps", c.norm_eps);
      read_if(j, "spatial_padding_mode", c.spatial_padding_mode);
      read_if(j, "decoder_num_layers", c.decoder_num_layers);
      read_if(j, "decoder_num_attention_heads", c.decoder_num_attention_heads);
      read_if(j, "decoder_attention_head_dim", c.decoder_attention_head_dim);
      read_if(j, "decoder_num_register_tokens", c.decoder_num_register_tokens);
      read_if(j, "decoder_ffn_mult", c.decoder_ffn_mult);
      read_if(j, "decoder_rope_theta", c.decoder_rope_theta);
      read_if(j, "decoder_rope_dim_ratio", c.decoder_rope_dim_ratio);
      read_if(j, "decoder_norm_eps", c.decoder_norm_eps);
      read_if(j, "clip_length", c.clip_length);
      read_if(j, "token_drop", c.token_drop);
      read_if(j, "latents_mean", c.latents_mean);
      read_if(j, "latents_std", c.latents_std);
    }
    if (!tiling.empty()) {
      const nlohmann::json t = parse(tiling, "tiling");
      read_if(t, "use_tiling", c.tiling);
      read_if(t, "tile_sample_min_height", c.tile_height);
      read_if(t, "tile_sample_min_width", c.tile_width);
      read_if(t, "tile_sample_min_overlap_height", c.tile_overlap_height);
      read_if(t, "tile_sample_min_overlap_width", c.tile_overlap_width);
    }
  } catch (const nlohmann::json::exception& e) {
    fail("{}: video VAE config has a field of the wrong type: {}", where, e.what());
  }
  c.validate(where);
  return c;
}

void VideoVaeConfig::validate(const std::string& where) const {
  const size_t levels = block_out_channels.size();
  H3_CHECK(levels > 0 && spatial_downsample_factors.size() == levels && temporal_downsample_factors.size() == levels,
           "{}: video VAE has {} levels but {} spatial and {} temporal factors", where, levels,
           spatial_downsample_factors.size(), temporal_downsample_factors.size());
  for (size_t i = 0; i < levels; ++i)
    H3_CHECK((spatial_downsample_factors[i] == 1 || spatial_downsample_factors[i] == 2) &&
                 temporal_downsample_factors[i] >= 1,
             "{}: video VAE level {} has factors (t {}, s {}); spatial factors must be 1 or 2", where, i,
             temporal_downsample_factors[i], spatial_downsample_factors[i]);
  for (int64_t ch : block_out_channels)
    H3_CHECK(norm_num_groups > 0 && ch % norm_num_groups == 0, "{}: video VAE {} channels not divisible by {} groups",
             where, ch, norm_num_groups);
  H3_CHECK(spatial_padding_mode == "reflect" || spatial_padding_mode == "zeros" || spatial_padding_mode == "replicate",
           "{}: video VAE spatial_padding_mode '{}' is not supported (reflect, zeros, replicate)", where,
           spatial_padding_mode);
  H3_CHECK(decoder_num_attention_heads > 0 && decoder_attention_head_dim > 0 && rope_dim() % 6 == 0 &&
               rope_dim() <= decoder_attention_head_dim,
           "{}: video VAE rotary dim {} (head dim {} x {}) must be a multiple of 6", where, rope_dim(),
           decoder_attention_head_dim, decoder_rope_dim_ratio);
  H3_CHECK(clip_length > 0 && token_drop >= 0, "{}: video VAE clip_length {} token_drop {}", where, clip_length,
           token_drop);
  H3_CHECK(tile_height > 0 && tile_width > 0 && tile_overlap_height > 0 && tile_overlap_width > 0 &&
               tile_height % spatial_ratio() == 0 && tile_width % spatial_ratio() == 0 &&
               tile_overlap_height < tile_height && tile_overlap_width < tile_width,
           "{}: video VAE tiles {}x{} with overlaps {}/{} must be positive multiples of {} larger than the overlap",
           where, tile_height, tile_width, tile_overlap_height, tile_overlap_width, spatial_ratio());
  H3_CHECK(latents_mean.size() == latents_std.size() &&
               (latents_mean.empty() || static_cast<int64_t>(latents_mean.size()) == latent_channels),
           "{}: video VAE latents_mean/std have {}/{} values for {} channels", where, latents_mean.size(),
           latents_std.size(), latent_channels);
}

std::string VideoVaeConfig::summary() const {
  return fmt::format(
      "video VAE: latent {} ch, {}x spatial {}x temporal; encoder levels [{}] x{} res, GN {}; ViT decoder {} layers "
      "{}x{} (dim {}), {} registers, ffn x{}, rope dim {}; clip {} drop {}; tiling {} ({}x{} px, overlap {}/{})",
      latent_channels, spatial_ratio(), temporal_ratio(), fmt::join(block_out_channels, ","), layers_per_block,
      norm_num_groups, decoder_num_layers, decoder_num_attention_heads, decoder_attention_head_dim, decoder_dim(),
      decoder_num_register_tokens, decoder_ffn_mult, rope_dim(), clip_length, token_drop, tiling ? "on" : "off",
      tile_height, tile_width, tile_overlap_height, tile_overlap_width);
}

TileAxis split_tiles(int64_t length, int64_t tile, int64_t min_overlap, int64_t ratio) {
  H3_CHECK(length > 0 && tile > 0 && min_overlap >= 0 && min_overlap < tile && ratio > 0,
           "split_tiles: length {} tile {} overlap {} ratio {}", length, tile, min_overlap, ratio);
  TileAxis a;
  if (tile >= length) {
    a.starts = {0};
    a.lengths = {length};
    return a;
  }
  int64_t n = (length + tile - 1) / tile;
  while (tile * n - min_overlap * (n - 1) < length) ++n;
  a.overlaps.assign(n - 1, min_overlap);
  const int64_t remaining = tile * n - min_overlap * (n - 1) - length;
  for (int64_t i = 0; i < remaining / ratio; ++i) a.overlaps[i % (n - 1)] += ratio;
  a.starts = {0};
  for (int64_t i = 0; i + 1 < n; ++i) a.starts.push_back(a.starts.back() + tile - a.overlaps[i]);
  a.lengths.assign(n, tile);
  return a;
}

int64_t TemporalChunkPlan::chunk_len(size_t i) const {
  const int64_t padded = latent_frames + pad_tokens;
  return std::min(starts[i] + chunk_tokens + token_overlap, padded) - starts[i];
}

TemporalChunkPlan plan_temporal_chunks(int64_t T, int64_t clip, int64_t drop, int64_t q) {
  H3_CHECK(T > 0, "video VAE decode: no latent frames");
  TemporalChunkPlan p;
  p.latent_frames = T;
  p.frame_pre_padding = ((-clip) % q + q) % q;
  p.chunk_tokens = (clip + q - 1) / q;
  p.token_overlap = ((-drop) % p.chunk_tokens + p.chunk_tokens) % p.chunk_tokens;
  p.frame_overlap = std::max<int64_t>(p.token_overlap * q - p.frame_pre_padding, 0);
  p.chunk_frames = p.chunk_tokens * q;
  const int64_t tokens = T + drop;
  p.pad_tokens = ((-tokens) % p.chunk_tokens + p.chunk_tokens) % p.chunk_tokens;
  const int64_t chunks = (tokens + p.pad_tokens) / p.chunk_tokens - (drop > 0 ? 1 : 0);
  H3_CHECK(chunks >= 1,
           "video VAE decode: {} latent frames make no complete temporal chunk (clip {}, token drop {}); pass more "
           "latent frames (17n+5 pixel frames <-> 5n+2 latent frames in the released geometry)",
           T, clip, drop);
  for (int64_t i = 0; i < chunks; ++i) p.starts.push_back(i * p.chunk_tokens);
  // Frames: every chunk emits its first part (chunk_frames - pre_padding); the last overlap part is emitted too.
  int64_t frames = 0;
  for (size_t i = 0; i < p.starts.size(); ++i) {
    const int64_t clip_frames = p.chunk_len(i) * q;
    const int64_t parts = drop > 0 ? 2 : 1;
    for (int64_t j = 0; j < parts; ++j) {
      const int64_t b = j * p.chunk_frames, e = std::min(b + p.chunk_frames, clip_frames);
      const int64_t n = std::max<int64_t>(e - b - p.frame_pre_padding, 0);
      if (j == 0)
        frames += n;
      else if (i + 1 == p.starts.size())
        frames += n;
    }
  }
  if (p.pad_tokens > 0) {
    const int64_t tail = clip % q;
    for (int64_t k = 0; k < p.pad_tokens; ++k) p.trim_frames += (tail && (T + k) % p.chunk_tokens == 0) ? tail : q;
  }
  p.out_frames = frames - p.trim_frames;
  return p;
}

void VideoVae::load_encoder(VaeWeightReader& r) {
  const int64_t lc = cfg_.latent_channels;
  const auto& ch = cfg_.block_out_channels;
  conv_in_w_ = r.get("encoder.conv_in.weight", {ch[0], cfg_.in_channels, 3, 3, 3});
  conv_in_b_ = r.get("encoder.conv_in.bias", {ch[0]});
  int64_t cin = ch[0];
  for (size_t l = 0; l < ch.size(); ++l) {
    Level lv;
    lv.ts = cfg_.temporal_downsample_factors[l];
    lv.ss = cfg_.spatial_downsample_factors[l];
    for (int64_t i = 0; i < cfg_.layers_per_block; ++i) {
      const std::string n = fmt::format("encoder.down_blocks.{}.resnets.{}.", l, i);
      const int64_t in = i == 0 ? cin : ch[l], out = ch[l];
      Resnet rs;
      rs.n1_w = r.get(n + "norm1.weight", {in});
      rs.n1_b = r.get(n + "norm1.bias", {in});
      rs.c1_w = r.get(n + "conv1.weight", {out, in, 3, 3, 3});
      rs.c1_b = r.get(n + "conv1.bias", {out});
      rs.n2_w = r.get(n + "norm2.weight", {out});
      rs.n2_b = r.get(n + "norm2.bias", {out});
      rs.c2_w = r.get(n + "conv2.weight", {out, out, 3, 3, 3});
      rs.c2_b = r.get(n + "conv2.bias", {out});
      if (in != out) {
        rs.sc_w = r.get(n + "conv_shortcut.weight", {out, in, 1, 1, 1});
        rs.sc_b = r.get(n + "conv_shortcut.bias", {out});
      }
      lv.resnets.push_back(std::move(rs));
    }
    if (lv.ts * lv.ss > 1) {
      const std::string n = fmt::format("encoder.down_blocks.{}.downsamplers.0.conv.", l);
      lv.down_w = r.get(n + "weight", {ch[l], ch[l], 3, 3, 3});
      lv.down_b = r.get(n + "bias", {ch[l]});
    }
    levels_.push_back(std::move(lv));
    cin = ch[l];
  }
  norm_out_enc_w_ = r.get("encoder.norm_out.weight", {ch.back()});
  norm_out_enc_b_ = r.get("encoder.norm_out.bias", {ch.back()});
  conv_out_w_ = r.get("encoder.conv_out.weight", {2 * lc, ch.back(), 3, 3, 3});
  conv_out_b_ = r.get("encoder.conv_out.bias", {2 * lc});
  quant_w_ = r.get("quant_conv.weight", {2 * lc, 2 * lc, 1, 1, 1});
  quant_b_ = r.get("quant_conv.bias", {2 * lc});
}

VideoVae::VideoVae(const SafeTensors& f, const std::string& prefix, const VideoVaeConfig& cfg, Precision precision,
                   Device device)
    : VideoVae(*WeightFiles::of(f), prefix, cfg, precision, device) {}

VideoVae::VideoVae(const TensorSource& f, const std::string& prefix, const VideoVaeConfig& cfg, Precision precision,
                   Device device)
    : cfg_(cfg), precision_(precision), dev_(device) {
  if (dev_ == Device::cpu)
    H3_CHECK(precision == Precision::f64 || precision == Precision::f32,
             "video VAE: {} is not supported on the CPU; use f32 or f64 (bf16 runs on the GPU: --device cuda)",
             precision_name(precision));
  else
    H3_CHECK(precision == Precision::f32 || precision == Precision::bf16,
             "video VAE on the GPU: precision {} is not supported; use f32 or bf16 (f64 runs on the CPU)",
             precision_name(precision));
  ct_ = precision == Precision::f64 ? DType::f64 : DType::f32;
  cfg_.validate(f.path());
  DeviceLoader host(Device::cpu, "video VAE (host)"), dev(dev_, "video VAE");
  VaeWeightReader r(f, prefix, ct_, "video VAE", host);
  const int64_t lc = cfg_.latent_channels, D = cfg_.decoder_dim(), hd = cfg_.decoder_attention_head_dim;
  const int64_t F = D * cfg_.decoder_ffn_mult;
  const int64_t pr = cfg_.spatial_ratio(), pt = cfg_.temporal_ratio();
  // The decoder's weights: in the compute dtype on the host for a CPU VAE; for a GPU VAE read straight to the
  // device, f32 layers in f32 (post_quant_conv, proj_in, norms, LayerScale, proj_out: the reference keeps proj_in
  // and proj_out out of autocast) and, in bf16, the block GEMMs' weights and biases in bf16.
  const bool gpu = dev_ != Device::cpu;
  const DType gemm_dt = precision_ == Precision::bf16 ? DType::bf16 : DType::f32;
  auto dec = [&](const std::string& n, const Shape& shape, bool gemm, const std::vector<RowRange>& rows = {}) {
    return gpu ? r.load(dev, n, shape, gemm ? gemm_dt : DType::f32, rows) : r.get(n, shape);
  };
  // post_quant_conv is a 1x1x1 conv: kept as a [lc, lc] matrix.
  pq_w_ = dec("post_quant_conv.weight", {lc, lc, 1, 1, 1}, false).reshape({lc, lc});
  pq_b_ = dec("post_quant_conv.bias", {lc}, false);
  proj_in_w_ = dec("decoder.proj_in.weight", {D, lc}, false);
  proj_in_b_ = dec("decoder.proj_in.bias", {D}, false);
  registers_ = dec("decoder.register_tokens", {1, cfg_.decoder_num_register_tokens, D}, false)
                   .reshape({cfg_.decoder_num_register_tokens, D});
  for (int64_t i = 0; i < cfg_.decoder_num_layers; ++i) {
    const std::string n = fmt::format("decoder.transformer_blocks.{}.", i);
    Block b;
    b.norm1 = dec(n + "norm1.weight", {D}, false);
    b.norm2 = dec(n + "norm2.weight", {D}, false);
    b.scale1 = dec(n + "scale1", {D}, false);
    b.scale2 = dec(n + "scale2", {D}, false);
    if (r.has(n + "attn.to_qkv.weight")) {
      // The original fused projection is per-head interleaved: rows [h0: q(hd) k(hd) v(hd); h1: ...]; part s of head
      // h is rows [h * 3 hd + s hd, + hd).
      Tensor* dst_w[3] = {&b.to_q, &b.to_k, &b.to_v};
      Tensor* dst_b[3] = {&b.q_b, &b.k_b, &b.v_b};
      Tensor w, bias;  // the whole fused tensors, read once on the host
      if (!gpu) w = r.get(n + "attn.to_qkv.weight", {3 * D, D}), bias = r.get(n + "attn.to_qkv.bias", {3 * D});
      for (int s = 0; s < 3; ++s) {
        std::vector<RowRange> rows;
        for (int64_t h = 0; h < D / hd; ++h) rows.push_back({h * 3 * hd + s * hd, h * 3 * hd + (s + 1) * hd});
        *dst_w[s] = gpu ? dec(n + "attn.to_qkv.weight", {3 * D, D}, true, rows) : gather_row_ranges(w, rows);
        *dst_b[s] = gpu ? dec(n + "attn.to_qkv.bias", {3 * D}, true, rows) : gather_row_ranges(bias, rows);
      }
    } else {
      b.to_q = dec(n + "attn.to_q.weight", {D, D}, true);
      b.q_b = dec(n + "attn.to_q.bias", {D}, true);
      b.to_k = dec(n + "attn.to_k.weight", {D, D}, true);
      b.k_b = dec(n + "attn.to_k.bias", {D}, true);
      b.to_v = dec(n + "attn.to_v.weight", {D, D}, true);
      b.v_b = dec(n + "attn.to_v.bias", {D}, true);
    }
    b.to_out = dec(n + "attn.to_out.0.weight", {D, D}, true);
    b.out_b = dec(n + "attn.to_out.0.bias", {D}, true);
    // diffusers' SwiGLU projection is [value; gate] along the output rows.
    b.ff_in = dec(n + "ff.net.0.proj.weight", {2 * F, D}, true);
    b.ff_in_b = dec(n + "ff.net.0.proj.bias", {2 * F}, true);
    b.ff_out = dec(n + "ff.net.2.weight", {D, F}, true);
    b.ff_out_b = dec(n + "ff.net.2.bias", {D}, true);
    blocks_.push_back(std::move(b));
  }
  norm_out_w_ = dec("decoder.norm_out.weight", {D}, false);
  norm_out_b_ = dec("decoder.norm_out.bias", {D}, false);
  proj_out_w_ = dec("decoder.proj_out.weight", {cfg_.out_channels * pt * pr * pr, D}, false);
  proj_out_b_ = dec("decoder.proj_out.bias", {cfg_.out_channels * pt * pr * pr}, false);
  if (gpu) load_report_ = dev.finish();  // the decoder's device load, timed alone

  has_encoder_ = r.has("encoder.conv_in.weight");
  if (has_encoder_) load_encoder(r);
  r.finish();
  if (!cfg_.latents_mean.empty()) {
    lat_mean_ = Tensor::from(cfg_.latents_mean, {lc}).to(ct_);
    lat_std_ = Tensor::from(cfg_.latents_std, {lc}).to(ct_);
  }
  if (gpu) {
    std::vector<float> ones(static_cast<size_t>(cfg_.decoder_attention_head_dim), 1.0f);
    qk_ones_ = Tensor::from(ones, {cfg_.decoder_attention_head_dim}).to_device(dev_).to(gemm_dt);
  }
  host.finish();
  if (!gpu) load_report_ = host.report();
}

namespace {
void check_latents(const Tensor& z, const VideoVaeConfig& c, const char* what) {
  H3_CHECK(z.ndim() == 4 && z.dim(0) == c.latent_channels && z.dim(1) > 0 && z.dim(2) > 0 && z.dim(3) > 0,
           "video VAE {}: latents must be [{}, frames, height, width] (one video, channels first), got {}", what,
           c.latent_channels, z.describe());
  H3_CHECK(dtype_is_float(z.dtype()), "video VAE {}: latents must be floating point, got {}", what, z.describe());
}
}  // namespace

Tensor VideoVae::denormalize(const Tensor& z) const {
  check_latents(z, cfg_, "denormalize");
  Tensor x = z.to(ct_);
  if (cfg_.latents_mean.empty()) return x;
  return dispatch(x, [&]<typename T>(T) {
    const T* m = lat_mean_.data<T>();
    const T* s = lat_std_.data<T>();
    return map_channels(x, [&](int64_t c, T v) { return v * s[c] + m[c]; });
  });
}

Tensor VideoVae::normalize(const Tensor& z) const {
  check_latents(z, cfg_, "normalize");
  Tensor x = z.to(ct_);
  if (cfg_.latents_mean.empty()) return x;
  return dispatch(x, [&]<typename T>(T) {
    const T* m = lat_mean_.data<T>();
    const T* s = lat_std_.data<T>();
    return map_channels(x, [&](int64_t c, T v) { return (v - m[c]) / s[c]; });
  });
}

void add_decode_units(VideoDecodePlan& p, int64_t r) {
  for (size_t i = 0; i < p.time.starts.size(); ++i)
    for (size_t a = 0; a < p.rows.starts.size(); ++a)
      for (size_t b = 0; b < p.cols.starts.size(); ++b) {
        VideoDecodeUnit u;
        u.index = static_cast<int64_t>(p.units.size());
        u.chunk = static_cast<int64_t>(i);
        u.tile_row = static_cast<int64_t>(a);
        u.tile_col = static_cast<int64_t>(b);
        u.t0 = p.time.starts[i];
        u.t1 = u.t0 + p.time.chunk_len(i);
        u.y0 = p.rows.starts[a] / r;
        u.y1 = std::min(u.y0 + p.rows.lengths[a] / r, p.latent_height);
        u.x0 = p.cols.starts[b] / r;
        u.x1 = std::min(u.x0 + p.cols.lengths[b] / r, p.latent_width);
        p.units.push_back(u);
      }
}

VideoDecodePlan video_decode_plan(const VideoVaeConfig& c, const Shape& shape) {
  H3_CHECK(shape.size() == 4 && shape[0] == c.latent_channels && shape[1] > 0 && shape[2] > 0 && shape[3] > 0,
           "video VAE decode: latents must be [{}, frames, height, width], got {}", c.latent_channels,
           shape_str(shape));
  VideoDecodePlan p;
  p.latent_frames = shape[1];
  p.latent_height = shape[2];
  p.latent_width = shape[3];
  p.time = plan_temporal_chunks(shape[1], c.clip_length, c.token_drop, c.temporal_ratio());
  const int64_t r = c.spatial_ratio(), H = shape[2] * r, W = shape[3] * r;
  if (c.tiling) {
    p.rows = split_tiles(H, c.tile_height, c.tile_overlap_height, r);
    p.cols = split_tiles(W, c.tile_width, c.tile_overlap_width, r);
  } else {
    p.rows = {{0}, {H}, {}};
    p.cols = {{0}, {W}, {}};
  }
  add_decode_units(p, r);
  return p;
}

VideoDecodePlan VideoVae::plan_decode(const Shape& shape) const {
  return video_decode_plan(cfg_, shape);
}

Tensor VideoVae::pad_latents(const Tensor& z, const VideoDecodePlan& plan) const {
  check_latents(z, cfg_, "decode");
  H3_CHECK(z.dim(1) == plan.latent_frames && z.dim(2) == plan.latent_height && z.dim(3) == plan.latent_width,
           "video VAE decode: latents {} do not match the plan ({} x {} x {})", z.describe(), plan.latent_frames,
           plan.latent_height, plan.latent_width);
  Tensor x = z.to(ct_);
  if (plan.time.pad_tokens == 0) return x;
  std::vector<Tensor> parts{x};
  Tensor last = vae::slice_dim(x, 1, x.dim(1) - 1, x.dim(1));
  for (int64_t k = 0; k < plan.time.pad_tokens; ++k) parts.push_back(last);
  return vae::concat_dim(parts, 1);
}

Tensor VideoVae::decode_unit_on_device(const Tensor& zp, const VideoDecodeUnit& u) const {
  Tensor block = vae::crop(zp.on_device() ? zp.cpu() : zp, u.t0, u.t1, u.y0, u.y1, u.x0, u.x1);
  return decode_block(block);
}

Tensor VideoVae::decode_unit(const Tensor& zp, const VideoDecodeUnit& u) const {
  Tensor d = decode_unit_on_device(zp, u);
  return d.on_device() ? d.cpu() : d;
}

Tensor VideoVae::stitch(const VideoDecodePlan& plan, const std::vector<Tensor>& decoded) const {
  H3_CHECK(decoded.size() == plan.units.size(), "video VAE stitch: {} decoded units for a plan of {}", decoded.size(),
           plan.units.size());
  const TemporalChunkPlan& tp = plan.time;
  const size_t rows = plan.rows.starts.size(), cols = plan.cols.starts.size();
  const bool two_parts = cfg_.token_drop > 0;
  std::vector<Tensor> out_parts;
  Tensor overlap;
  for (size_t i = 0; i < tp.starts.size(); ++i) {
    std::vector<std::vector<Tensor>> grid(rows);
    for (size_t a = 0; a < rows; ++a)
      for (size_t b = 0; b < cols; ++b) grid[a].push_back(decoded[(i * rows + a) * cols + b]);
    Tensor clip = vae::stitch_tiles(grid, plan.rows.overlaps, plan.cols.overlaps);
    for (int64_t j = 0; j < (two_parts ? 2 : 1); ++j) {
      const int64_t b = j * tp.chunk_frames;
      Tensor part = vae::slice_dim(clip, 1, b, b + tp.chunk_frames);
      part = vae::slice_dim(part, 1, tp.frame_pre_padding, part.dim(1));
      if (j == 0) {
        if (overlap.defined() && overlap.numel() > 0 && overlap.ndim() == 4)
          part = vae::blend_dim(overlap, part, tp.frame_overlap, 1);
        out_parts.push_back(part);
      } else {
        overlap = part;
      }
    }
  }
  if (overlap.defined() && overlap.ndim() == 4) out_parts.push_back(overlap);
  Tensor video = vae::concat_dim(out_parts, 1);
  if (tp.trim_frames > 0) video = vae::slice_dim(video, 1, 0, video.dim(1) - tp.trim_frames);
  H3_ASSERT(video.dim(1) == tp.out_frames, "video VAE stitch: {} frames, plan says {}", video.dim(1), tp.out_frames);
  return video;
}

Tensor VideoVae::decode(const Tensor& z) const {
  check_latents(z, cfg_, "decode");
  if (dev_ != Device::cpu) return decode_into_clip(z);  // model/vae/video_stream.cpp
  const VideoDecodePlan plan = plan_decode(z.shape());
  const Tensor zp = pad_latents(z, plan);
  std::vector<Tensor> decoded;
  decoded.reserve(plan.units.size());
  for (const auto& u : plan.units) decoded.push_back(decode_unit(zp, u));
  return stitch(plan, decoded);
}

Tensor VideoVae::to_pixels01(const Tensor& x) {
  H3_CHECK(x.ndim() >= 1 && x.dim(0) == 3, "to_pixels01: expected [3, ...] RGB, got {}", x.describe());
  static const double mean[3] = {0.485, 0.456, 0.406}, stdv[3] = {0.229, 0.224, 0.225};
  return dispatch(x, [&]<typename T>(T) {
    return map_channels(x, [&](int64_t c, T v) {
      const T y = v * T(stdv[c]) + T(mean[c]);
      return std::min(T(1), std::max(T(0), y));
    });
  });
}

Tensor VideoVae::encode_clip(const Tensor& x) const {
  if (!cfg_.tiling) return encode_block(x);
  const int64_t r = cfg_.spatial_ratio();
  const TileAxis ty = split_tiles(x.dim(2), cfg_.tile_height, cfg_.tile_overlap_height, r);
  const TileAxis tx = split_tiles(x.dim(3), cfg_.tile_width, cfg_.tile_overlap_width, r);
  std::vector<std::vector<Tensor>> grid(ty.starts.size());
  for (size_t a = 0; a < ty.starts.size(); ++a)
    for (size_t b = 0; b < tx.starts.size(); ++b) {
      Tensor tile = vae::slice_dim(vae::slice_dim(x, 2, ty.starts[a], ty.starts[a] + ty.lengths[a]), 3, tx.starts[b],
                                   tx.starts[b] + tx.lengths[b]);
      grid[a].push_back(encode_block(tile));
    }
  std::vector<int64_t> oy, ox;
  for (int64_t o : ty.overlaps) oy.push_back(o / r);
  for (int64_t o : tx.overlaps) ox.push_back(o / r);
  return vae::stitch_tiles(grid, oy, ox);
}

Tensor VideoVae::encode_mean(const Tensor& pixels) const {
  H3_CHECK(has_encoder_, "video VAE encode: this checkpoint has no encoder weights (encoder.*)");
  H3_CHECK(pixels.ndim() == 4 && pixels.dim(0) == cfg_.in_channels && pixels.dim(1) > 0,
           "video VAE encode: pixels must be [{}, frames, height, width] (ImageNet-normalised), got {}",
           cfg_.in_channels, pixels.describe());
  const int64_t r = cfg_.spatial_ratio();
  H3_CHECK(pixels.dim(2) % r == 0 && pixels.dim(3) % r == 0,
           "video VAE encode: height and width must be multiples of {}, got {}", r, pixels.describe());
  H3_CHECK(dtype_is_float(pixels.dtype()), "video VAE encode: pixels must be floating point, got {}",
           pixels.describe());
  Tensor x = pixels.to(ct_);
  Tensor moments;
  const int64_t F = x.dim(1), clip = cfg_.clip_length;
  if (F == 1) {
    moments = encode_clip(x);
  } else {
    if (F % clip != 0) {
      std::vector<Tensor> parts{x};
      Tensor last = vae::slice_dim(x, 1, F - 1, F);
      for (int64_t k = 0; k < (clip - F % clip); ++k) parts.push_back(last);
      x = vae::concat_dim(parts, 1);
    }
    std::vector<Tensor> clips;
    for (int64_t i = 0; i < x.dim(1) / clip; ++i)
      clips.push_back(encode_clip(vae::slice_dim(x, 1, i * clip, (i + 1) * clip)));
    moments = vae::concat_dim(clips, 1);
    if (cfg_.token_drop > 0) moments = vae::slice_dim(moments, 1, 0, moments.dim(1) - cfg_.token_drop);
  }
  return vae::slice_dim(moments, 0, 0, cfg_.latent_channels);
}

}  // namespace h3

#include "pipeline/memory_plan.h"

#include <algorithm>
#include <nlohmann/json.hpp>
#include <tuple>

#include "core/error.h"
#include "core/names.h"
#include "distributed/partition.h"
#include "model/dit/fp8_layers.h"
#include "model/vae/procedural.h"

namespace h3 {

namespace {

// The caching allocator's slack and the libraries' workspaces beside a phase's live tensors: cuBLASLt's 64 MiB, cuDNN
// plans, RoPE / AdaLN / index tables, algorithm tuning. 1 GiB covers the difference between the DiT's measured peaks
// and its live set at both resolutions (docs/notes.md, the H200 peaks in memory_plan.h).
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

double gib(int64_t b) {
  return static_cast<double>(b) / static_cast<double>(kGiB);
}

constexpr std::array<Named<MemoryPolicy>, 3> kPolicyNames{
    {{MemoryPolicy::automatic, "auto"}, {MemoryPolicy::resident, "resident"}, {MemoryPolicy::phases, "phases"}}};

}  // namespace

std::string_view memory_policy_name(MemoryPolicy p) {
  return name_in(kPolicyNames, p);
}

MemoryPolicy memory_policy_from_name(const std::string& s) {
  if (const MemoryPolicy* p = find_named(kPolicyNames, s)) return *p;
  fail(
      "memory plan '{}': expected auto (keep what fits loaded), resident (load everything once) or phases (load "
      "and free each model with its phase)",
      s);
}

int64_t dit_weight_bytes(const DitConfig& c, Precision p, DistMode mode, int K, int U) {
  const int heads = c.num_attention_heads;
  const int64_t H = c.hidden_size, F = c.ffn_dim;
  // Rank 0 holds the largest slices (the partition rule gives the remainder to the first ranks).
  const Range heads_out = K > 1 ? part_of(heads, K, 0) : Range{0, heads};
  const Range heads_qkv = mode == DistMode::ulysses_ag ? part_of(heads, U, 0) : heads_out;
  const Range ffn = K > 1 ? part_of(F, K, 0) : Range{0, F};
  const Range ada = K > 1 ? part_of(18 * H, K, 0) : Range{0, 18 * H};
  const DitFp8Layers fp8 = p == Precision::fp8 ? dit_fp8_layers(c, mode, K, U) : DitFp8Layers{};
  const int64_t es = element_bytes(p);
  int64_t total = 0;
  for (const auto& [key, shape] : c.parameters()) {
    const int64_t n = shape_numel(shape), rows = shape[0];
    // The released f32 layers: patch projections, time MLP, output heads.
    if (starts_with(key, "proj_in.") || starts_with(key, "audio_proj_in.") || starts_with(key, "time_embedder.") ||
        starts_with(key, "proj_out.") || starts_with(key, "audio_proj_out.")) {
      total += n * 4;
      continue;
    }
    if (!starts_with(key, "transformer_blocks.")) {  // refiner, norms, context embedder, final layer: bf16
      total += n * es;
      continue;
    }
    // A block GEMM weight: its rank's slice, one byte a value in FP8 (plus one f32 scale a row at most).
    auto gemm = [&](int64_t kept, int64_t whole, bool in_fp8) {
      const int64_t part = n / whole * kept;
      total += in_fp8 ? part + 4 * rows : part * es;
    };
    if (ends_with(key, "attn.to_q.weight") || ends_with(key, "attn.to_k.weight") || ends_with(key, "attn.to_v.weight"))
      gemm(heads_qkv.size(), heads, fp8.qkv);
    else if (ends_with(key, "attn.to_out.0.weight"))
      gemm(heads_out.size(), heads, fp8.out);
    else if (ends_with(key, "ff.net.0.proj.weight"))
      gemm(ffn.size(), F, fp8.ff_in);
    else if (ends_with(key, "ff.net.2.weight"))
      gemm(ffn.size(), F, fp8.ff_out);
    else if (ends_with(key, "adaln_proj.linear.weight") || ends_with(key, "adaln_proj.linear.bias"))
      total += n / (18 * H) * ada.size() * es;
    else
      total += n * es;
  }
  return total;
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

int64_t text_weight_bytes(const Qwen3VlTextConfig& c, int64_t layers, Precision p, int tp) {
  const int64_t es = element_bytes(p), hidden = c.hidden, D = c.head_dim, G = c.n_kv_heads;
  const int64_t per_kv = c.n_heads / std::max<int64_t>(G, 1);
  int64_t per_layer = 2 * hidden + 2 * D;  // norms, replicated
  const Range units = tp > 1 ? part_of(G, static_cast<int>(std::min<int64_t>(tp, G)), 0) : Range{0, G};
  for (int64_t g = units.begin; g < units.end; ++g) {
    const int64_t Fg = part_of(c.intermediate, static_cast<int>(G), static_cast<int>(g)).size();
    per_layer += (per_kv * D + 2 * D) * hidden + hidden * per_kv * D + 3 * Fg * hidden;
  }
  return (c.vocab_size * hidden + layers * per_layer) * es;
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

int64_t video_decode_activation_bytes(const VideoVaeConfig& c, Precision p, int64_t T, int64_t h, int64_t w,
                                      int64_t device_bytes) {
  const VideoDecodePlan plan = video_decode_plan(c, {c.latent_channels, T, h, w});
  const int64_t per_chunk = static_cast<int64_t>(plan.rows.starts.size() * plan.cols.starts.size());
  int64_t unit = 0, unit_out = 0;
  for (const VideoDecodeUnit& u : plan.units) {
    unit = std::max(unit, video_decoder_unit_bytes(c, p, u.t1 - u.t0, u.y1 - u.y0, u.x1 - u.x0));
    unit_out = std::max(unit_out, c.out_channels * c.temporal_ratio() * (u.t1 - u.t0) * c.spatial_ratio() *
                                      (u.y1 - u.y0) * c.spatial_ratio() * (u.x1 - u.x0) * 4);
  }
  // Units per stacked ViT call: a quarter of the device (VideoVae::batch_size), at most 32 and a chunk row's worth.
  const int64_t batch = std::clamp<int64_t>(device_bytes / 4 / std::max<int64_t>(unit, 1), 1,
                                            std::min<int64_t>(VideoVae::kMaxDecodeBatch, per_chunk));
  // Two chunk rows of decoded units wait for the stitch; one chunk's finished frames; the padded latents.
  const int64_t frames = plan.time.chunk_frames * c.out_channels * h * c.spatial_ratio() * w * c.spatial_ratio() * 4;
  return batch * unit + 2 * per_chunk * unit_out + frames + c.latent_channels * (T + 8) * h * w * 4 + kPhaseFixed;
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

int64_t MemoryPlan::peak() const {
  int64_t p = 0;
  for (const auto& ph : phases) p = std::max(p, ph.peak());
  return p;
}

const PhaseMemory& MemoryPlan::phase(const std::string& name) const {
  for (const auto& ph : phases)
    if (ph.phase == name) return ph;
  fail("memory plan: no phase '{}'", name);
}

std::vector<std::string> MemoryPlan::describe() const {
  std::string kept, per;
  auto add = [](std::string& to, const char* what) { to += (to.empty() ? "" : ", ") + std::string(what); };
  if (dit_weights > 0) add(dit_resident ? kept : per, "DiT");
  if (text_on_gpu && text_weights > 0) add(text_resident ? kept : per, "text tower");
  if (vae_weights > 0) add(vae_resident ? kept : per, "VAEs");
  std::vector<std::string> lines;
  lines.push_back(
      fmt::format("memory plan ({}): resident {}; loaded per phase {}{}; peak {:.1f} of {:.1f} GiB "
                  "({:.1f} GiB kept free){}",
                  memory_policy_name(policy), kept.empty() ? "none" : kept, per.empty() ? "none" : per,
                  text_on_gpu ? "" : "; text tower on the CPU", gib(peak()), gib(device_bytes), gib(reserve_bytes),
                  fits ? "" : " -- DOES NOT FIT"));
  for (const auto& ph : phases)
    lines.push_back(fmt::format("  {:<8} peak {:6.1f} GiB = resident {:.1f} + {} {:.1f} + activations {:.1f}", ph.phase,
                                gib(ph.peak()), gib(ph.resident), ph.model.empty() ? "loaded" : ph.model,
                                gib(ph.weights), gib(ph.activations)));
  if (!fits) lines.push_back("  " + problem);
  return lines;
}

nlohmann::json MemoryPlan::to_json() const {
  nlohmann::json ph = nlohmann::json::array();
  for (const auto& p : phases)
    ph.push_back({{"phase", p.phase},
                  {"model", p.model},
                  {"resident_bytes", p.resident},
                  {"weight_bytes", p.weights},
                  {"activation_bytes", p.activations},
                  {"peak_bytes", p.peak()}});
  return {{"policy", std::string(memory_policy_name(policy))},
          {"resident", {{"dit", dit_resident}, {"text", text_resident}, {"vae", vae_resident}}},
          {"text_on_gpu", text_on_gpu},
          {"weight_bytes", {{"dit", dit_weights}, {"text", text_weights}, {"vae", vae_weights}}},
          {"phases", ph},
          {"peak_bytes", peak()},
          {"device_bytes", device_bytes},
          {"reserve_bytes", reserve_bytes},
          {"fits", fits},
          {"problem", problem}};
}

// The phases' peaks with a given resident set.
MemoryPlan plan_memory_resident(const MemoryPlanInputs& in, bool dit_res, bool text_res, bool vae_res) {
  MemoryPlan m;
  m.policy = in.policy;
  m.device_bytes = in.device_bytes;
  m.reserve_bytes = in.reserve_bytes > 0 ? in.reserve_bytes : 2 * kGiB + in.device_bytes / 20;
  m.text_on_gpu = in.text_on_gpu && !in.text_elsewhere;
  m.dit_weights = in.dit_on_gpu ? dit_weight_bytes(in.dit, in.dit_precision, in.mode, in.K, in.U) : 0;
  m.text_weights = m.text_on_gpu ? text_weight_bytes(in.text, in.text_layers, in.text_precision, in.text_tp) : 0;
  m.vae_weights = in.vae_on_gpu ? video_decoder_weight_bytes(in.video_vae, in.vae_precision) +
                                      audio_decoder_weight_bytes(in.audio_vae)
                                : 0;
  m.dit_resident = dit_res;
  m.text_resident = text_res && m.text_on_gpu;
  m.vae_resident = vae_res;
  const int64_t resident =
      (dit_res ? m.dit_weights : 0) + (m.text_resident ? m.text_weights : 0) + (vae_res ? m.vae_weights : 0);
  PhaseMemory enc{"encode", "", resident, 0, 0};
  if (m.text_on_gpu) {
    enc.model = m.text_resident ? "" : "text tower";
    enc.weights = (m.text_resident ? 0 : m.text_weights) + in.vision_bytes;
    enc.activations = text_activation_bytes(in.text, in.text_precision, in.text_tokens);
  }
  PhaseMemory den{"denoise", "", resident, 0, 0};
  if (in.dit_on_gpu) {
    den.model = dit_res ? "" : "DiT";
    den.weights = dit_res ? 0 : m.dit_weights;
    den.activations = dit_activation_bytes(in.dit, in.dit_precision, in.seq_len, in.mode, in.K, in.U);
  }
  PhaseMemory dec{"decode", "", resident, 0, 0};
  if (in.vae_on_gpu) {
    dec.model = vae_res ? "" : "VAEs";
    dec.weights = vae_res ? 0 : m.vae_weights;
    dec.activations = std::max(video_decode_activation_bytes(in.video_vae, in.vae_precision, in.latent_frames,
                                                             in.latent_h, in.latent_w, in.device_bytes),
                               audio_decode_activation_bytes(in.audio_vae, in.audio_latents));
  }
  m.phases = {enc, den, dec};
  m.fits = m.peak() <= m.device_bytes - m.reserve_bytes;
  if (!m.fits) {
    for (const auto& ph : m.phases)
      if (ph.peak() > m.device_bytes - m.reserve_bytes) {
        m.problem = fmt::format(
            "the {} phase needs {:.1f} GiB (resident {:.1f} + {} {:.1f} + activations {:.1f} GiB at {} packed rows) "
            "but this GPU leaves {:.1f} GiB ({:.1f} GiB less {:.1f} kept free)",
            ph.phase, gib(ph.peak()), gib(ph.resident), ph.model.empty() ? "loaded" : ph.model, gib(ph.weights),
            gib(ph.activations), in.seq_len, gib(m.device_bytes - m.reserve_bytes), gib(m.device_bytes),
            gib(m.reserve_bytes));
        break;
      }
  }
  return m;
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  H3_CHECK(in.device_bytes > 0, "memory plan: the device memory is unknown (is the GPU backend started?)");
  switch (in.policy) {
    case MemoryPolicy::resident:
      return plan_memory_resident(in, true, true, true);
    case MemoryPolicy::phases:
      return plan_memory_resident(in, false, false, false);
    case MemoryPolicy::automatic:
      break;
  }
  // The most residency that fits, the largest loads saved first.
  for (auto [d, t, v] : {std::tuple{true, true, true}, {true, false, true}, {false, false, true}}) {
    MemoryPlan m = plan_memory_resident(in, d, t, v);
    if (m.fits) return m;
  }
  return plan_memory_resident(in, false, false, false);
}

MemoryPlan plan_memory_or_suggest(const MemoryPlanInputs& in, const FramesGeometry& at_frames,
                                  const std::vector<int64_t>& frame_choices) {
  MemoryPlan m = plan_memory(in);
  if (m.fits) return m;
  std::vector<std::string> would;
  if (in.policy == MemoryPolicy::resident) {
    MemoryPlanInputs x = in;
    x.policy = MemoryPolicy::phases;
    if (plan_memory(x).fits) would.push_back("--memory-plan phases (each model loaded for its phase)");
  }
  MemoryPlanInputs base = in;
  if (base.policy == MemoryPolicy::resident) base.policy = MemoryPolicy::phases;
  if (in.dit_precision == Precision::bf16) {
    MemoryPlanInputs x = base;
    x.dit_precision = Precision::fp8;
    if (plan_memory(x).fits) would.push_back("--precision fp8");
  }
  if (in.text_on_gpu && !in.text_elsewhere && m.phase("encode").peak() > m.device_bytes - m.reserve_bytes) {
    MemoryPlanInputs x = base;
    x.text_on_gpu = false;
    if (plan_memory(x).fits) would.push_back("--text-device cpu (the text tower on the CPU)");
  }
  if (at_frames) {
    for (int64_t f : frame_choices) {
      const std::optional<MemoryPlanInputs> x = at_frames(f);
      if (!x) continue;
      MemoryPlanInputs y = *x;
      if (y.policy == MemoryPolicy::resident) y.policy = MemoryPolicy::phases;
      if (plan_memory(y).fits) {
        would.push_back(fmt::format("--frames {} at this size", f));
        break;
      }
    }
  }
  std::string list;
  for (size_t i = 0; i < would.size(); ++i) list += (i == 0 ? "" : i + 1 == would.size() ? " or " : ", ") + would[i];
  m.problem += would.empty() ? "; nothing smaller fits one GPU this size: spread the DiT over more GPUs (--ranks N "
                               "--mode tensor shards its weights)"
                             : "; would fit: " + list;
  return m;
}

}  // namespace h3

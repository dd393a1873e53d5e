#include "model/dit/export.h"

#include <cstring>
#include <regex>

#include "core/error.h"

namespace h3 {

ExportLayout export_layout_from_name(const std::string& s) {
  if (s == "diffusers") return ExportLayout::diffusers;
  if (s == "official") return ExportLayout::official;
  if (s == "comfy") return ExportLayout::comfy;
  fail("unknown layout '{}' (allowed: diffusers, official, comfy)", s);
}

namespace {

// Released parameter names of a config, in file order.
std::vector<std::string> official_names(const DitConfig& c) {
  std::vector<std::string> n = {"video_patch_proj.weight",       "video_patch_proj.bias",
                                "audio_patch_proj.weight",       "audio_patch_proj.bias",
                                "condition_proj.weight",         "condition_proj.bias",
                                "time_embedder.proj_in.weight",  "time_embedder.proj_in.bias",
                                "time_embedder.proj_out.weight", "time_embedder.proj_out.bias"};
  auto block = [&](const std::string& p, bool adaln) {
    for (const char* s : {"norm1.weight", "norm2.weight", "attn.qkv_proj.weight", "attn.q_norm.weight",
                          "attn.k_norm.weight", "attn.out_proj.weight", "mlp.fc1.weight", "mlp.fc2.weight"})
      n.push_back(p + s);
    if (adaln) {
      n.push_back(p + "adaln_proj.linear.weight");
      n.push_back(p + "adaln_proj.linear.bias");
    }
  };
  for (int r = 0; r < c.num_refiner_layers; ++r) block("token_refiner.blocks." + std::to_string(r) + ".", false);
  n.push_back("token_refiner.final_norm.weight");
  for (int b = 0; b < c.num_layers; ++b) block("blocks." + std::to_string(b) + ".", true);
  for (const char* s : {"final_layer.norm.weight", "final_layer.adaln_proj.linear.weight",
                        "final_layer.adaln_proj.linear.bias", "final_layer.video_out.weight",
                        "final_layer.video_out.bias", "final_layer.audio_out.weight", "final_layer.audio_out.bias"})
    n.push_back(s);
  return n;
}

bool is_block_gemm(const std::string& name) {
  static const std::regex official(R"(^blocks\.\d+\.(attn\.(qkv_proj|out_proj)|mlp\.(fc1|fc2))\.weight$)");
  static const std::regex diffusers(
      R"(^transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0)|ff\.net\.(0\.proj|2))\.weight$)");
  return std::regex_match(name, official) || std::regex_match(name, diffusers);
}

// The second MLP projection takes no activation scale in ComfyUI's files.
bool has_input_scale(const std::string& name) {
  return name.find("fc2") == std::string::npos && name.find("ff.net.2") == std::string::npos;
}

}  // namespace

void export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant,
                std::vector<std::pair<std::string, Tensor>>& tensors, std::map<std::string, std::string>& metadata) {
  const DitConfig& c = ck.config();
  auto emit = [&](const std::string& name, Tensor t, const std::string& prefix) {
    if (t.dtype() != DType::f32) t = t.to(DType::f32);
    if (quant != QuantFormat::none && is_block_gemm(name))
      quantize_weight(prefix + name, t, quant, has_input_scale(name), tensors);
    else
      tensors.emplace_back(prefix + name, t.dtype() == dt ? t : t.to(dt));
  };
  metadata["config"] = c.to_json_text();
  metadata["quantization"] = std::string(quant_format_name(quant));
  if (quant == QuantFormat::scaled_fp8) tensors.emplace_back("scaled_fp8", Tensor(DType::fp8_e4m3, {0}));
  if (layout == ExportLayout::diffusers) {
    metadata["format"] = "h3 diffusers";
    for (const auto& [key, shape] : c.parameters()) emit(key, ck.get(key), "");
    return;
  }
  const bool interleaved = layout == ExportLayout::official;
  const std::string prefix = layout == ExportLayout::comfy ? "model.diffusion_model." : "";
  metadata["format"] = interleaved ? "h3 released layout" : "h3 comfy layout";
  metadata["qkv_layout"] = interleaved ? "qkv_proj rows per-head interleaved" : "qkv_proj rows blocked";
  size_t covered = 0;
  for (const auto& name : official_names(c)) {
    const std::string d = dit_official_to_diffusers(name);
    H3_ASSERT(!d.empty(), "export: no diffusers name for '{}'", name);
    if (d.ends_with("attn.qkv_proj.weight")) {
      const std::string p = d.substr(0, d.size() - std::strlen("qkv_proj.weight"));
      Tensor parts[3] = {ck.get(p + "to_q.weight").to(DType::f32), ck.get(p + "to_k.weight").to(DType::f32),
                         ck.get(p + "to_v.weight").to(DType::f32)};
      const int64_t inner = parts[0].dim(0), H = parts[0].dim(1), D = c.attention_head_dim;
      Tensor fused(DType::f32, {3 * inner, H});
      const size_t rb = static_cast<size_t>(H) * sizeof(float);
      auto* o = static_cast<std::byte*>(fused.raw());
      for (int part = 0; part < 3; ++part) {
        const auto* in = static_cast<const std::byte*>(parts[part].raw());
        if (!interleaved)
          std::memcpy(o + part * inner * rb, in, inner * rb);
        else
          for (int64_t h = 0; h < inner / D; ++h) std::memcpy(o + (h * 3 * D + part * D) * rb, in + h * D * rb, D * rb);
      }
      emit(name, fused, prefix);
      covered += 3;
    } else if (d.ends_with("ff.net.0.proj.weight")) {  // [value; gate] -> released [gate; value]
      Tensor t = ck.get(d).to(DType::f32), o(DType::f32, t.shape());
      const size_t half = t.nbytes() / 2;
      std::memcpy(o.raw(), static_cast<const std::byte*>(t.raw()) + half, half);
      std::memcpy(static_cast<std::byte*>(o.raw()) + half, t.raw(), half);
      emit(name, o, prefix);
      covered += 1;
    } else {
      emit(name, ck.get(d), prefix);
      covered += 1;
    }
  }
  H3_ASSERT(covered == c.parameters().size(), "export: {} of {} parameters written", covered, c.parameters().size());
}

}  // namespace h3

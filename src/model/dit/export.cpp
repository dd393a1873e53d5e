#include "model/dit/export.h"

#include <chrono>
#include <cstring>
#include <initializer_list>
#include <string_view>

#include "core/device.h"
#include "core/error.h"
#include "ops/ops.h"

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

// "PREFIX" + digits + "." + one of `rests`, the whole name (read by hand: names are as long as a file makes them).
bool block_name_is(std::string_view name, std::string_view prefix, std::initializer_list<std::string_view> rests) {
  if (!name.starts_with(prefix)) return false;
  size_t dot = prefix.size();
  while (dot < name.size() && name[dot] >= '0' && name[dot] <= '9') ++dot;
  if (dot == prefix.size() || dot >= name.size() || name[dot] != '.') return false;
  const std::string_view rest = name.substr(dot + 1);
  for (std::string_view r : rests)
    if (rest == r) return true;
  return false;
}

bool is_block_gemm(const std::string& name) {
  return block_name_is(name, "blocks.",
                       {"attn.qkv_proj.weight", "attn.out_proj.weight", "mlp.fc1.weight", "mlp.fc2.weight"}) ||
         block_name_is(name, "transformer_blocks.",
                       {"attn.to_q.weight", "attn.to_k.weight", "attn.to_v.weight", "attn.to_out.0.weight",
                        "ff.net.0.proj.weight", "ff.net.2.weight"});
}

// The second MLP projection takes no activation scale in ComfyUI's files.
bool has_input_scale(const std::string& name) {
  return name.find("fc2") == std::string::npos && name.find("ff.net.2") == std::string::npos;
}

}  // namespace

namespace {

// Rows [from, from + n) of `src` into rows [to, to + n) of `dst` (same width and dtype, same device).
void put_rows(Tensor& dst, int64_t to, const Tensor& src, int64_t from, int64_t n) {
  const size_t rb = src.dim(0) > 0 ? src.nbytes() / static_cast<size_t>(src.dim(0)) : 0;
  auto* d = static_cast<std::byte*>(dst.raw()) + static_cast<size_t>(to) * rb;
  const auto* s = static_cast<const std::byte*>(src.raw()) + static_cast<size_t>(from) * rb;
  if (dst.on_device())
    device_hooks().copy(d, true, s, true, static_cast<size_t>(n) * rb);
  else
    std::memcpy(d, s, static_cast<size_t>(n) * rb);
}

Tensor as_f32(Tensor t) {
  return t.dtype() == DType::f32 ? t : t.to(DType::f32);
}

}  // namespace

ExportPlan plan_export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant) {
  const DitConfig& c = ck.config();
  ExportPlan plan;
  plan.dtype = dt;
  plan.quant = quant;
  plan.metadata["config"] = c.to_json_text();
  plan.metadata["quantization"] = std::string(quant_format_name(quant));
  std::map<std::string, Shape> shapes;
  for (const auto& [key, shape] : c.parameters()) shapes[key] = shape;
  auto add = [&](const std::string& name, const std::string& prefix, Shape shape, std::function<Tensor(Device)> make) {
    ExportItem it;
    it.name = prefix + name;
    it.shape = std::move(shape);
    it.quantized = quant != QuantFormat::none && is_block_gemm(name);
    it.input_scale = has_input_scale(name);
    it.make = std::move(make);
    plan.items.push_back(std::move(it));
  };
  const DitCheckpoint* src = &ck;
  if (layout == ExportLayout::diffusers) {
    plan.metadata["format"] = "h3 diffusers";
    for (const auto& [key, shape] : c.parameters())
      add(key, "", shape, [src, key = key](Device d) { return src->get(key, d); });
    return plan;
  }
  const bool interleaved = layout == ExportLayout::official;
  const std::string prefix = layout == ExportLayout::comfy ? "model.diffusion_model." : "";
  plan.metadata["format"] = interleaved ? "h3 released layout" : "h3 comfy layout";
  plan.metadata["qkv_layout"] = interleaved ? "qkv_proj rows per-head interleaved" : "qkv_proj rows blocked";
  size_t covered = 0;
  const int64_t D = c.attention_head_dim;
  for (const auto& name : official_names(c)) {
    const std::string d = dit_official_to_diffusers(name);
    H3_ASSERT(!d.empty(), "export: no diffusers name for '{}'", name);
    if (d.ends_with("attn.qkv_proj.weight")) {
      const std::string p = d.substr(0, d.size() - std::strlen("qkv_proj.weight"));
      const Shape part = shapes.at(p + "to_q.weight");
      add(name, prefix, {3 * part[0], part[1]}, [src, p, interleaved, D](Device dev) {
        const Tensor parts[3] = {as_f32(src->get(p + "to_q.weight", dev)), as_f32(src->get(p + "to_k.weight", dev)),
                                 as_f32(src->get(p + "to_v.weight", dev))};
        const int64_t inner = parts[0].dim(0);
        Tensor fused = Tensor::empty(DType::f32, {3 * inner, parts[0].dim(1)}, dev);
        for (int q = 0; q < 3; ++q) {
          if (!interleaved)
            put_rows(fused, q * inner, parts[q], 0, inner);
          else
            for (int64_t h = 0; h < inner / D; ++h) put_rows(fused, h * 3 * D + q * D, parts[q], h * D, D);
        }
        return fused;
      });
      covered += 3;
    } else if (d.ends_with("ff.net.0.proj.weight")) {  // [value; gate] -> released [gate; value]
      add(name, prefix, shapes.at(d), [src, d](Device dev) {
        const Tensor t = as_f32(src->get(d, dev));
        Tensor o = Tensor::empty(DType::f32, t.shape(), dev);
        const int64_t half = t.dim(0) / 2;
        put_rows(o, 0, t, half, half);
        put_rows(o, half, t, 0, half);
        return o;
      });
      covered += 1;
    } else {
      add(name, prefix, shapes.at(d), [src, d](Device dev) { return src->get(d, dev); });
      covered += 1;
    }
  }
  H3_ASSERT(covered == c.parameters().size(), "export: {} of {} parameters written", covered, c.parameters().size());
  return plan;
}

std::vector<SafeTensorsEntry> ExportPlan::entries() const {
  std::vector<SafeTensorsEntry> e;
  if (quant == QuantFormat::scaled_fp8) e.push_back({"scaled_fp8", DType::fp8_e4m3, {0}});
  for (const ExportItem& it : items) {
    if (!it.quantized) {
      e.push_back({it.name, dtype, it.shape});
      continue;
    }
    for (auto& q : quantized_entries(it.name, it.shape, quant, it.input_scale)) e.push_back(std::move(q));
  }
  return e;
}

std::vector<std::pair<std::string, Tensor>> export_item(const ExportPlan& plan, size_t i, Device device) {
  const ExportItem& it = plan.items.at(i);
  std::vector<std::pair<std::string, Tensor>> out;
  Tensor v = as_f32(it.make(device));
  H3_ASSERT(v.shape() == it.shape, "export: '{}' made as {}, planned {}", it.name, v.describe(), shape_str(it.shape));
  if (!it.quantized) {
    out.emplace_back(it.name, (v.dtype() == plan.dtype ? v : v.to(plan.dtype)).cpu());
    return out;
  }
  const bool fp8 = plan.quant == QuantFormat::fp8 || plan.quant == QuantFormat::scaled_fp8;
  if (device != Device::cpu && fp8) {
    // The device's per-tensor quantization (ops::quantize_fp8: s = max(amax / 448, 1e-12), q = e4m3(w / s) with
    // saturation) is the host's (s = amax / 448, or 1 for an all-zero weight) bit for bit except where amax / 448
    // is below 1e-12: those weights (all zero, or vanishing) are quantized on the host.
    const Tensor q = ops::quantize_fp8(v);
    const float s = static_cast<float>(q.scale()->get(0));
    if (s > 1e-12f) {
      append_fp8_weight(it.name, q.cpu(), s, plan.quant, it.input_scale, out);
      return out;
    }
  }
  quantize_weight(it.name, v.cpu(), plan.quant, it.input_scale, out);
  return out;
}

ExportStats write_export(const ExportPlan& plan, const std::string& path, Device device) {
  const auto t0 = std::chrono::steady_clock::now();
  SafeTensorsWriter w(path, plan.entries(), plan.metadata);
  if (plan.quant == QuantFormat::scaled_fp8) w.write("scaled_fp8", Tensor(DType::fp8_e4m3, {0}));
  for (size_t i = 0; i < plan.items.size(); ++i)
    for (auto& [name, t] : export_item(plan, i, device)) w.write(name, std::move(t));
  w.finish();
  ExportStats st;
  st.file_bytes = w.file_bytes();
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return st;
}

void export_dit(const DitCheckpoint& ck, DType dt, ExportLayout layout, QuantFormat quant,
                std::vector<std::pair<std::string, Tensor>>& tensors, std::map<std::string, std::string>& metadata) {
  const ExportPlan plan = plan_export_dit(ck, dt, layout, quant);
  for (const auto& [k, v] : plan.metadata) metadata[k] = v;
  if (quant == QuantFormat::scaled_fp8) tensors.emplace_back("scaled_fp8", Tensor(DType::fp8_e4m3, {0}));
  for (size_t i = 0; i < plan.items.size(); ++i)
    for (auto& t : export_item(plan, i, Device::cpu)) tensors.push_back(std::move(t));
}

}  // namespace h3

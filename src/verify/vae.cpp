#include "verify/vae.h"

#include <set>

#include "core/compare.h"
#include "core/log.h"
#include "model/vae/audio_vae.h"
#include "model/vae/shard.h"
#include "model/vae/video_vae.h"

namespace h3 {

namespace {

// Cases are the prefixes of "<case>.input.<name>" keys, sorted.
std::vector<std::string> cases_of(const SafeTensors& f) {
  std::set<std::string> s;
  for (const auto& k : f.keys()) {
    const auto p = k.find(".input.");
    if (p != std::string::npos && !k.starts_with("weight.")) s.insert(k.substr(0, p));
  }
  return {s.begin(), s.end()};
}

// The reference output "<case>.output.<name>" (or "<case>.output.f64.<name>"); "" when absent.
std::string output_key(const SafeTensors& f, const std::string& c, const std::string& name) {
  for (const auto& k : {c + ".output.f64." + name, c + ".output." + name})
    if (f.has(k)) return k;
  return "";
}

void add_line(VerifyReport& rep, const std::string& what, const Tensor& got, const Tensor& ref, double tol) {
  std::string label = what;
  Tensor g = got;
  // A reference stored in f32 cannot resolve an f64 result better than its own rounding (~3e-8): compare the f64
  // output rounded to f32 the same way, which is exact when the engine agrees with the reference far below 1 ulp.
  if (ref.dtype() == DType::f32 && got.dtype() == DType::f64) {
    g = got.to(DType::f32);
    label += " (f32-stored ref)";
  }
  Diff d = compare(g, ref);
  const bool shape_ok = d.shape_ok && got.numel() == ref.numel();
  rep.lines.push_back({label, d.rel_l2, d.max_abs, tol, shape_ok && d.rel_l2 <= tol});
}

}  // namespace

double vae_tolerance(Precision p) {
  H3_CHECK(p != Precision::fp8, "VAE verify: fp8 is not a VAE precision; use f64, f32 or bf16 (GPU)");
  return p == Precision::f64 ? 1e-9 : p == Precision::f32 ? 1e-5 : 1e-2;
}

namespace {

// A VAE golden file: one of its decoder's or encoder's first weights, and a case input whose key ends in one of
// `inputs`.
bool looks_like_vae_golden(const SafeTensors& f, std::initializer_list<const char*> first_weights,
                           std::initializer_list<const char*> inputs) {
  bool weights = false;
  for (const char* w : first_weights) weights = weights || f.has(w);
  if (!weights) return false;
  for (const auto& k : f.keys())
    for (const char* in : inputs)
      if (k.ends_with(in)) return true;
  return false;
}

// The key of a decoder case's latents: `<c>.input.latents_normalized` when the case has it (the VAE denormalizes
// it before decoding), else `<c><raw>` as stored; "" for a case with neither (an encoder case).
std::string latents_key(const SafeTensors& f, const std::string& c, const char* raw) {
  if (f.has(c + ".input.latents_normalized")) return c + ".input.latents_normalized";
  return f.has(c + raw) ? c + raw : "";
}

bool is_normalized(const std::string& latents_key) {
  return latents_key.ends_with(".input.latents_normalized");
}

}  // namespace

bool looks_like_video_vae_golden(const SafeTensors& f) {
  return f.has("weight.post_quant_conv.weight") &&
         looks_like_vae_golden(f, {"weight.decoder.proj_in.weight", "weight.encoder.conv_in.weight"},
                               {".input.latents_normalized", ".input.latents", ".input.pixels_normalized"});
}

bool looks_like_audio_vae_golden(const SafeTensors& f) {
  return looks_like_vae_golden(f, {"weight.dec_in_proj.weight", "weight.encoder.block.0.weight_v"},
                               {".input.latents_denormalized", ".input.latents_normalized", ".input.waveform"});
}

VerifyReport verify_video_vae_file(const SafeTensors& f, Precision precision, Comm* comm, Device device) {
  const double tol = vae_tolerance(precision);
  const VideoVaeConfig cfg = VideoVaeConfig::from_json_text(f.meta("config"), f.meta("tiling"), f.path());
  spdlog::info("{}: {}", f.path(), cfg.summary());
  const VideoVae vae(f, "weight.", cfg, precision, device);
  VerifyReport rep;
  for (const auto& c : cases_of(f)) {
    if (const std::string key = latents_key(f, c, ".input.latents"); !key.empty()) {
      const Tensor in = f.get(key);
      Tensor z = in.ndim() == 5 && in.dim(0) == 1 ? in.reshape({in.dim(1), in.dim(2), in.dim(3), in.dim(4)}) : in;
      if (is_normalized(key)) z = vae.denormalize(z);
      const Tensor dec = comm ? decode_video_sharded(vae, z, *comm) : vae.decode(z);
      if (auto k = output_key(f, c, "decoder"); !k.empty()) add_line(rep, c + " decoder", dec, f.get(k), tol);
      if (auto k = output_key(f, c, "pixels01"); !k.empty())
        add_line(rep, c + " pixels01", VideoVae::to_pixels01(dec), f.get(k), tol);
    } else if (f.has(c + ".input.pixels_normalized")) {
      const Tensor in = f.get(c + ".input.pixels_normalized");
      const Tensor x = in.ndim() == 5 && in.dim(0) == 1 ? in.reshape({in.dim(1), in.dim(2), in.dim(3), in.dim(4)}) : in;
      const Tensor mean = vae.encode_mean(x);
      if (auto k = output_key(f, c, "mean"); !k.empty()) add_line(rep, c + " mean", mean, f.get(k), tol);
    }
  }
  return rep;
}

VerifyReport verify_audio_vae_file(const SafeTensors& f, Precision precision, Comm* comm, Device device) {
  const double tol = vae_tolerance(precision);
  const AudioVaeConfig cfg =
      f.meta("config").empty() ? AudioVaeConfig{} : AudioVaeConfig::from_json_text(f.meta("config"), f.path());
  spdlog::info("{}: {}", f.path(), cfg.summary());
  const AudioVae vae(f, "weight.", cfg, precision, device);
  VerifyReport rep;
  for (const auto& c : cases_of(f)) {
    if (const std::string key = latents_key(f, c, ".input.latents_denormalized"); !key.empty()) {
      Tensor z = f.get(key);
      if (is_normalized(key)) z = vae.denormalize(z);
      if (auto k = output_key(f, c, "waveform"); !k.empty()) {
        const Tensor wave = comm ? decode_audio_sharded(vae, z, *comm) : vae.decode(z);
        add_line(rep, c + " waveform", wave, f.get(k), tol);
      }
    } else if (f.has(c + ".input.waveform")) {
      const Tensor mean = vae.encode_mean(f.get(c + ".input.waveform"));
      if (auto k = output_key(f, c, "mean"); !k.empty()) add_line(rep, c + " mean", mean, f.get(k), tol);
    }
  }
  return rep;
}

}  // namespace h3

// h3 vae-parity FILE --ranks N: every decode case of a video- or audio-VAE golden file decoded on 1 rank
// (rank 0, first, freed after the comparison) and sharded over the world (model/vae/shard.h). Prints per case
// rel-L2, max-abs and bitwise against the 1-rank output (and rel-L2 against the golden output), then every
// rank's units and times. PASS only when every sharded output is bitwise equal to the 1-rank output.
#include <chrono>
#include <memory>
#include <set>

#include "commands.h"
#include "core/compare.h"
#include "core/log.h"
#include "distributed/comm.h"
#include "model/vae/shard.h"
#include "verify/vae.h"

namespace h3::cli {

namespace {

struct DecodeCase {
  std::string name, input_key, output_key;
  bool normalized = false;
};

// Decode cases: "<case>.input.<latents key>" with the reference "<case>.output[.f64].<output>", sorted by
// name.
std::vector<DecodeCase> decode_cases(const SafeTensors& f, const std::vector<std::string>& normalized_inputs,
                                     const std::string& raw_input, const std::string& output) {
  std::set<std::string> names;
  for (const auto& k : f.keys()) {
    const auto p = k.find(".input.");
    if (p != std::string::npos && !k.starts_with("weight.")) names.insert(k.substr(0, p));
  }
  std::vector<DecodeCase> out;
  for (const auto& c : names) {
    DecodeCase d{c, "", "", false};
    for (const auto& in : normalized_inputs)
      if (f.has(c + ".input." + in)) d = {c, c + ".input." + in, "", true};
    if (d.input_key.empty() && f.has(c + ".input." + raw_input)) d.input_key = c + ".input." + raw_input;
    if (d.input_key.empty()) continue;  // an encode case
    for (const auto& k : {c + ".output.f64." + output, c + ".output." + output})
      if (d.output_key.empty() && f.has(k)) d.output_key = k;
    out.push_back(d);
  }
  return out;
}

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

Runner add_vae_parity(CLI::App& app) {
  auto* cmd = app.add_subcommand("vae-parity",
                                 "decode a VAE golden file's cases on 1 rank and sharded over --ranks N; PASS when "
                                 "bitwise equal");
  struct Opts {
    std::string file, precision = "f32";
  };
  auto o = std::make_shared<Opts>();
  cmd->add_option("file", o->file, "video- or audio-VAE golden file")->required();
  add(cmd, opt::precision, o->precision);
  return [o](const GlobalContext& ctx) -> int {
    Comm& w = world();
    const bool root = w.rank() == 0;
    SafeTensors f = SafeTensors::open(o->file);
    const bool video = looks_like_video_vae_golden(f);
    if (!video && !looks_like_audio_vae_golden(f))
      fail("{}: not a video- or audio-VAE golden file (vae-parity runs VAE decode cases)", o->file);
    const Precision prec = precision_from_name(o->precision);
    const Device dev = ctx.compute_device();
    std::unique_ptr<VideoVae> vvae;
    std::unique_ptr<AudioVae> avae;
    std::vector<DecodeCase> cases;
    if (video) {
      vvae = std::make_unique<VideoVae>(
          f, "weight.", VideoVaeConfig::from_json_text(f.meta("config"), f.meta("tiling"), f.path()), prec, dev);
      cases = decode_cases(f, {"latents_normalized"}, "latents", "decoder");
    } else {
      const AudioVaeConfig cfg =
          f.meta("config").empty() ? AudioVaeConfig{} : AudioVaeConfig::from_json_text(f.meta("config"), f.path());
      avae = std::make_unique<AudioVae>(f, "weight.", cfg, prec, dev);
      cases = decode_cases(f, {"latents_normalized"}, "latents_denormalized", "waveform");
    }
    H3_CHECK(!cases.empty(), "{}: no decode cases", o->file);
    auto latents = [&](const DecodeCase& c) {
      Tensor z = f.get(c.input_key);
      if (video && z.ndim() == 5 && z.dim(0) == 1) z = z.reshape({z.dim(1), z.dim(2), z.dim(3), z.dim(4)});
      if (c.normalized) z = video ? vvae->denormalize(z) : avae->denormalize(z);
      return z;
    };

    // The 1-rank reference first, on rank 0 only.
    std::vector<Tensor> reference(cases.size());
    std::vector<double> reference_s(cases.size(), 0);
    if (root)
      for (size_t i = 0; i < cases.size(); ++i) {
        const auto t0 = std::chrono::steady_clock::now();
        reference[i] = video ? vvae->decode(latents(cases[i])) : avae->decode(latents(cases[i]));
        reference_s[i] = seconds_since(t0);
      }
    w.barrier("vae-parity: reference done");

    if (root) {
      std::printf("vae-parity %s: %s VAE decode, 1 rank vs %d ranks, %s on the %s\n", o->file.c_str(),
                  video ? "video" : "audio", w.size(), o->precision.c_str(), dev == Device::cuda ? "GPU" : "CPU");
      std::printf("%-28s %6s %12s %12s %8s %14s %9s %9s  %s\n", "case", "units", "rel_l2", "max_abs", "bitwise",
                  "golden rel_l2", "1-rank s", "sharded s", "result");
    }
    bool pass = true;
    std::vector<std::vector<double>> per_case_stats;
    for (size_t i = 0; i < cases.size(); ++i) {
      const DecodeCase& c = cases[i];
      const Tensor z = latents(c);
      ShardDecodeStats st;
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor out = video ? decode_video_sharded(*vvae, z, w, &st) : decode_audio_sharded(*avae, z, w, &st);
      const double sharded_s = seconds_since(t0);
      // Every rank's stats to every rank: [units, cost, decode_s, gather_s, stitch_s] per rank.
      const double mine[5] = {static_cast<double>(st.units), static_cast<double>(st.cost), st.decode_s, st.gather_s,
                              st.stitch_s};
      std::vector<double> all(static_cast<size_t>(5 * w.size()));
      w.allgatherv(mine, all.data(), std::vector<int64_t>(w.size(), 5), DType::f64, "vae-parity stats");
      per_case_stats.push_back(all);
      if (!root) continue;
      const Diff d = compare(out, reference[i]);
      const bool ok = d.shape_ok && d.bitwise;
      pass &= ok;
      const double golden = c.output_key.empty() ? -1 : compare(out, f.get(c.output_key)).rel_l2;
      int64_t units = 0;
      for (int r = 0; r < w.size(); ++r) units += static_cast<int64_t>(all[5 * r]);
      std::printf("%-28s %6lld %12.3e %12.3e %8s %14.3e %9.3f %9.3f  %s\n", c.name.c_str(),
                  static_cast<long long>(units), d.rel_l2, d.max_abs, d.bitwise ? "yes" : "no", golden, reference_s[i],
                  sharded_s, ok ? "ok" : "FAIL");
      reference[i] = Tensor();  // freed once compared
    }
    if (root) {
      std::printf("%-28s %4s %6s %10s %10s %10s %10s\n", "per rank", "rank", "units", "cost", "decode s", "gather s",
                  "stitch s");
      for (size_t i = 0; i < cases.size(); ++i)
        for (int r = 0; r < w.size(); ++r) {
          const double* s = per_case_stats[i].data() + 5 * r;
          std::printf("%-28s %4d %6lld %10lld %10.3f %10.3f %10.3f\n", cases[i].name.c_str(), r,
                      static_cast<long long>(s[0]), static_cast<long long>(s[1]), s[2], s[3], s[4]);
        }
      if (pass)
        std::printf("PASS: sharded %s VAE decode on %d ranks is bitwise identical to the 1-rank decode\n",
                    video ? "video" : "audio", w.size());
      else
        std::printf("FAIL: sharded %s VAE decode on %d ranks differs from the 1-rank decode\n",
                    video ? "video" : "audio", w.size());
    }
    // Every rank returns rank 0's verdict.
    int32_t verdict = pass ? 0 : 1;
    w.broadcast(&verdict, sizeof(verdict), 0, "vae-parity verdict");
    return verdict;
  };
}

}  // namespace h3::cli

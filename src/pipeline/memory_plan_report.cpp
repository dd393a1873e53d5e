// The memory plan as people and run records read it: policy names, the summary lines, the JSON.
#include <algorithm>
#include <array>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/names.h"
#include "pipeline/memory_plan.h"

namespace h3 {

namespace {

double gib(int64_t b) {
  return static_cast<double>(b) / static_cast<double>(kGiB);
}

constexpr std::array<Named<MemoryPolicy>, 3> kPolicyNames{
    {{MemoryPolicy::automatic, "auto"}, {MemoryPolicy::resident, "resident"}, {MemoryPolicy::phases, "phases"}}};

// "13 of 50 blocks on the device, 37 streamed through 3 x 0.84 GiB".
std::string layers_text(const LayerResidency& r, const char* unit) {
  std::string s = fmt::format("{} of {} {} resident", r.resident, r.layers, unit);
  if (r.kept > 0) s += fmt::format(" ({} kept)", r.kept);
  if (r.streamed() > 0)
    s += fmt::format(", {} streamed through {} x {:.2f} GiB", r.streamed(), r.ring_slots, gib(r.layer_bytes));
  return s;
}

nlohmann::json residency_json(const LayerResidency& r) {
  return {{"layers", r.layers},       {"resident", r.resident},     {"kept", r.kept},
          {"streamed", r.streamed()}, {"ring_slots", r.ring_slots}, {"layer_bytes", r.layer_bytes}};
}

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

int64_t MemoryPlan::peak() const {
  int64_t p = 0;
  for (const auto& ph : phases) p = std::max(p, ph.peak());
  return p;
}

int64_t MemoryPlan::host_peak() const {
  int64_t p = 0;
  for (const auto& ph : phases) p = std::max(p, ph.host_bytes);
  return p;
}

double MemoryPlan::slowdown_s() const {
  double s = 0;
  for (const auto& ph : phases) s += ph.slowdown_s;
  return s;
}

const PhaseMemory& MemoryPlan::phase(const std::string& name) const {
  for (const auto& ph : phases)
    if (ph.phase == name) return ph;
  fail("memory plan: no phase '{}'", name);
}

std::vector<std::string> MemoryPlan::describe() const {
  std::string kept_text;
  auto add = [&](const std::string& what) { kept_text += (kept_text.empty() ? "" : ", ") + what; };
  if (kept.dit_blocks > 0)
    add(dit_resident ? "DiT" : fmt::format("DiT ({} of {} blocks)", kept.dit_blocks, dit.layers));
  if (kept.text_layers > 0)
    add(text_resident ? "text tower" : fmt::format("text tower ({} of {} layers)", kept.text_layers, text.layers));
  if (kept.vaes) add("VAEs");
  std::vector<std::string> lines;
  lines.push_back(fmt::format(
      "memory plan ({}): budget {:.1f} GiB{} ({:.1f} for the runtime); kept between requests: {}{}; peak {:.1f} GiB; "
      "at least {:.1f} GiB needed; host {:.1f} GiB at most{}{}",
      memory_policy_name(policy), gib(budget_bytes),
      device_bytes > 0 ? fmt::format(" of {:.1f} free", gib(device_bytes)) : "", gib(reserve_bytes),
      kept_text.empty() ? "none" : kept_text, text_on_gpu ? "" : "; text tower on the CPU", gib(peak()),
      gib(minimum_bytes), gib(host_peak()),
      host_limit_bytes > 0 ? fmt::format(" of {:.1f} given", gib(host_limit_bytes)) : "",
      fits ? "" : " -- DOES NOT FIT"));
  for (const auto& ph : phases) {
    std::string line =
        fmt::format("  {:<8} peak {:6.1f} GiB = kept {:.1f} + {} {:.1f} + ring {:.1f} + activations {:.1f}", ph.phase,
                    gib(ph.peak()), gib(ph.resident), ph.model.empty() ? "loaded" : ph.model, gib(ph.weights),
                    gib(ph.ring), gib(ph.activations));
    if (ph.phase == "encode" && text.layers > 0) line += "; " + layers_text(text, "layers");
    if (ph.phase == "denoise" && dit.layers > 0) line += "; " + layers_text(dit, "blocks");
    if (ph.phase == "decode" && vae.batch > 0) line += fmt::format("; {} units a batch", vae.batch);
    // The cost: behind the compute when its seconds are known, else every copy second (an upper bound).
    if (ph.streamed > 0)
      line +=
          fmt::format("; {:.1f} GiB over the link a {} ({:.2f} s at {:.1f} GB/s{}), {} {:.1f} s lost a request{}",
                      gib(ph.streamed), ph.phase == "denoise" ? "forward" : "pass", ph.copy_s, ph.gbps,
                      ph.from_checkpoint ? ", from the checkpoint (host memory short)" : ", from page-locked copies",
                      ph.compute_s > 0 ? "about" : "at most", ph.slowdown_s,
                      ph.compute_s > 0 ? fmt::format(" behind {:.2f} s of compute", ph.compute_s) : "");
    lines.push_back(line);
  }
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
                  {"ring_bytes", p.ring},
                  {"activation_bytes", p.activations},
                  {"peak_bytes", p.peak()},
                  {"streamed_bytes", p.streamed},
                  {"passes", p.passes},
                  {"copy_s", p.copy_s},
                  {"compute_s", p.compute_s},
                  {"slowdown_s", p.slowdown_s},
                  {"host_pinned_bytes", p.host_pinned},
                  {"host_pool_bytes", p.host_pool},
                  {"host_bytes", p.host_bytes},
                  {"from_checkpoint", p.from_checkpoint}});
  return {{"policy", std::string(memory_policy_name(policy))},
          {"resident", {{"dit", dit_resident}, {"text", text_resident}, {"vae", vae_resident}}},
          {"kept", {{"dit_blocks", kept.dit_blocks}, {"text_layers", kept.text_layers}, {"vaes", kept.vaes}}},
          {"dit", residency_json(dit)},
          {"text", residency_json(text)},
          {"vae", {{"kept", vae.kept}, {"stack_bytes", vae.stack_bytes}, {"batch", vae.batch}}},
          {"text_on_gpu", text_on_gpu},
          {"weight_bytes", {{"dit", dit_weights}, {"text", text_weights}, {"vae", vae_weights}}},
          {"phases", ph},
          {"peak_bytes", peak()},
          {"host_peak_bytes", host_peak()},
          {"slowdown_s", slowdown_s()},
          {"link_gbps", link_gbps},
          {"host_limit_bytes", host_limit_bytes},
          {"device_bytes", device_bytes},
          {"budget_bytes", budget_bytes},
          {"reserve_bytes", reserve_bytes},
          {"minimum_bytes", minimum_bytes},
          {"minimum_detail", minimum_detail},
          {"fits", fits},
          {"problem", problem},
          {"describe", describe()}};
}

}  // namespace h3

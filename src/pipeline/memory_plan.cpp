// The planning policy of memory_plan.h: what each phase holds and streams for a kept set, which kept set a policy
// takes, the minimum budget and the refusals with what would fit.
#include "pipeline/memory_plan.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "backend/pinned_pool.h"
#include "core/error.h"
#include "io/layer_stream.h"

namespace h3 {

namespace {

double gib(int64_t b) {
  return static_cast<double>(b) / static_cast<double>(kGiB);
}
// GiB rounded up to the tenth printed, for a minimum a person passes back as a budget.
double gib_up(int64_t b) {
  return std::ceil(gib(b) * 10.0) / 10.0;
}

// The models' bytes for one set of inputs, computed once for every kept set a policy tries.
struct Sizes {
  bool text = false, dit = false, vae = false;  // on this rank's GPU
  TextBytes tb;
  DitBytes db;
  int64_t text_act = 0, dit_act = 0, vae_weights = 0, audio_act = 0;
  VideoDecodeBytes vd;
  int64_t budget = 0, reserve = 0;
  int64_t room() const { return budget - reserve; }
};

Sizes sizes_of(const MemoryPlanInputs& in) {
  H3_CHECK(in.device_bytes > 0 || in.budget_bytes > 0,
           "memory plan: the device memory is unknown (is the GPU backend started?) and no budget was given");
  H3_CHECK(in.ring_slots >= kMinRingSlots, "memory plan: a streaming ring needs at least {} slots, got {}",
           kMinRingSlots, in.ring_slots);
  H3_CHECK(in.link_gbps > 0 && in.disk_gbps > 0, "memory plan: link and disk rates must be positive ({} / {} GB/s)",
           in.link_gbps, in.disk_gbps);
  Sizes s;
  s.budget = in.budget_bytes > 0 ? in.budget_bytes : default_device_budget(in.device_bytes);
  s.reserve = in.reserve_bytes > 0 ? in.reserve_bytes : kRuntimeReserve;
  s.text = in.text_on_gpu && !in.text_elsewhere;
  s.dit = in.dit_on_gpu;
  s.vae = in.vae_on_gpu;
  if (s.text) {
    s.tb = text_bytes(in.text, in.text_layers, in.text_precision, in.text_tp);
    s.text_act = text_activation_bytes(in.text, in.text_precision, in.text_tokens);
  }
  if (s.dit) {
    s.db = dit_bytes(in.dit, in.dit_precision, in.mode, in.K, in.U);
    s.dit_act = dit_activation_bytes(in.dit, in.dit_precision, in.seq_len, in.mode, in.K, in.U);
  }
  if (s.vae) {
    s.vae_weights =
        video_decoder_weight_bytes(in.video_vae, in.vae_precision) + audio_decoder_weight_bytes(in.audio_vae);
    s.vd = video_decode_bytes(in.video_vae, in.vae_precision, in.latent_frames, in.latent_h, in.latent_w);
    s.audio_act = audio_decode_activation_bytes(in.audio_vae, in.audio_latents);
  }
  return s;
}

struct Placement {
  int resident = 0, slots = 0;
  bool ok = false;
};

// As many of `layers` layers as fit `room` beside a ring of `slots` slots (fewer, down to kMinRingSlots, when that
// is what fits), at least `kept`. Not ok: the kept layers and the smallest ring do not fit (or, without streaming,
// the whole model does not).
Placement place(int layers, int64_t layer, int kept, int64_t room, int slots, bool stream) {
  if (layer <= 0 || int64_t{layers} * layer <= room) return {layers, 0, true};
  if (!stream) return {layers, 0, false};
  for (int b = slots; b >= kMinRingSlots; --b) {
    const int64_t left = room - int64_t{b} * layer;
    if (left < int64_t{kept} * layer) continue;
    return {static_cast<int>(std::min<int64_t>(layers - 1, left / layer)), b, true};
  }
  return {kept, std::min(kMinRingSlots, layers - kept), false};
}

// The streaming cost of a phase: copies per pass at `gbps`, and what they add to the request after overlapping
// `compute_s` per pass (0: nothing overlaps).
void cost(PhaseMemory& ph, int64_t layer_bytes, double gbps, double compute_s) {
  ph.compute_s = compute_s;
  ph.copy_s = static_cast<double>(ph.streamed) / (gbps * 1e9);
  if (ph.streamed == 0) {
    ph.slowdown_s = 0;
    return;
  }
  const double per_pass = compute_s > 0 ? std::max(0.0, ph.copy_s - compute_s) + layer_bytes / (gbps * 1e9) : ph.copy_s;
  ph.slowdown_s = per_pass * ph.passes;
}

// A model of layers in its phase: `base` bytes on the device through it (counted in the kept bytes when kept),
// `extra` loaded for the phase only (the vision tower), `layers` layers of `layer` bytes, `kept_layers` of them kept.
struct Layered {
  const char *phase, *model;
  int64_t base = 0, extra = 0, act = 0;
  int layers = 0;
  int64_t layer = 0;
  int kept_layers = 0;
  int64_t kept_bytes = 0;  // the model's bytes kept between requests (base + kept layers; 0 when none)
};

PhaseMemory layered_phase(const Layered& l, const MemoryPlanInputs& in, int64_t kept_all, int64_t room,
                          LayerResidency& out, bool& ok) {
  PhaseMemory ph{l.phase, l.model};
  ph.resident = kept_all;
  const int64_t others = kept_all - l.kept_bytes;
  const Placement p = place(l.layers, l.layer, l.kept_layers, room - others - l.base - l.extra - l.act, in.ring_slots,
                            in.stream_layers);
  ok = ok && p.ok;
  out = LayerResidency{l.layers, p.resident, l.kept_layers, p.slots, l.layer};
  ph.weights = (l.kept_bytes > 0 ? 0 : l.base) + l.extra + int64_t{p.resident - l.kept_layers} * l.layer;
  ph.ring = out.ring_bytes();
  ph.activations = l.act;
  ph.streamed = out.streamed_bytes();
  if (l.kept_bytes > 0 && l.kept_layers == l.layers && l.extra == 0) ph.model = "";
  return ph;
}

int64_t frames_bytes(const MemoryPlanInputs& in) {
  const int64_t W = in.width > 0 ? in.width : in.latent_w * in.video_vae.spatial_ratio();
  const int64_t H = in.height > 0 ? in.height : in.latent_h * in.video_vae.spatial_ratio();
  const int64_t F = in.frames > 0 ? in.frames : in.latent_frames * in.video_vae.temporal_ratio();
  return W * H * F * 3 * 4;  // the decoded frames, f32 RGB, on their way to the MP4 writer
}

// Pinned host memory per phase and where the streams come from (memory_plan.h: host memory).
//
// Under the phases policy each model takes its page-locked blocks from the pool and gives them back as its phase ends;
// the pool (backend/pinned_pool.h) keeps given blocks until the request's end, a later model reuses a kept block of
// its size up to a quarter larger, and its first large miss frees the rest. The phases run on the pool's own
// bookkeeping with stand-in addresses, and host_pool is what it holds. Why: 768p FP8 at 16 GiB on an H100 held
// 41.45 GiB from the denoise to the end (the DiT's 46 blocks of 0.84 GiB took 41 of the text tower's 0.91 GiB records
// and 5 new ones), where the DiT's own 38.8 GiB had been planned, and the decode's RSS (44.2 GiB) passed the plan's
// "at most".
void plan_host(const MemoryPlanInputs& in, const Sizes& s, MemoryPlan& m) {
  const bool per_phase = in.policy == MemoryPolicy::phases;
  const int64_t parked =
      (s.text ? s.tb.total() - (m.kept.text_layers > 0 ? s.tb.base : 0) - int64_t{m.kept.text_layers} * s.tb.layer
              : 0) +
      (s.dit ? s.db.total() - (m.kept.dit_blocks > 0 ? s.db.base : 0) - int64_t{m.kept.dit_blocks} * s.db.block : 0) +
      (s.vae && !m.kept.vaes ? s.vae_weights : 0);
  const int64_t rings = std::max(m.text.ring_bytes(), m.dit.ring_bytes());
  uintptr_t next = 0;
  PinnedPool pool([&next](size_t) { return reinterpret_cast<void*>(++next * 64); }, [](void*) {});
  std::vector<void*> held;
  for (PhaseMemory& ph : m.phases) {
    const LayerResidency* lr = ph.phase == "encode" ? &m.text : ph.phase == "denoise" ? &m.dit : nullptr;
    const int64_t around = kHostProcessBytes + (ph.phase == "decode" ? frames_bytes(in) : 0);
    ph.host_pinned = per_phase ? (lr ? lr->streamed_bytes() : 0) : parked;
    // The streamer's rule (io/layer_stream.h), so that the models stream from where the plan says: page-locked copies
    // while they fit beside kParkHostMarginBytes, else the checkpoint through a staging ring, which must fit too.
    ph.from_checkpoint =
        in.host_bytes > 0 && lr && lr->streamed() > 0 && !pinned_copies_fit(ph.host_pinned, in.host_bytes);
    if (ph.from_checkpoint) {
      ph.host_pinned = per_phase ? lr->ring_bytes() : rings;
      if (!pinned_copies_fit(ph.host_pinned, in.host_bytes)) m.host_short = true;
    }
    ph.host_pool = ph.host_pinned;
    if (per_phase) {
      for (void* p : held) pool.give(p);
      held.clear();
      const int blocks = !lr ? 0 : ph.from_checkpoint ? lr->ring_slots : lr->streamed();
      for (int i = 0; i < blocks; ++i) held.push_back(pool.take(static_cast<size_t>(lr->layer_bytes)));
      const PinnedPoolStats st = pool.stats();
      ph.host_pool = st.kept_bytes + st.in_use_bytes;
    }
    ph.host_bytes = ph.host_pool + around;
    const double gbps = ph.from_checkpoint ? std::min(in.link_gbps, in.disk_gbps) : in.link_gbps;
    ph.gbps = gbps;
    cost(ph, lr ? lr->layer_bytes : 0, gbps, ph.phase == "denoise" ? in.dit_forward_s : 0);
  }
}

std::string request_label(const MemoryPlanInputs& in) {
  std::string s =
      in.width > 0 ? fmt::format("{}x{}", in.width, in.height) : fmt::format("{}x{} latents", in.latent_w, in.latent_h);
  if (in.frames > 0) s += fmt::format(", {} frames", in.frames);
  if (in.dit_on_gpu) s += fmt::format(", DiT {}", precision_name(in.dit_precision));
  if (in.K * in.U > 1) s += fmt::format(", {} over {} ranks", dist_mode_name(in.mode), in.K * in.U);
  return s;
}

// The least budget of the request and what makes it up (the largest phase, every layer streamed through the smallest
// ring, a one-unit VAE batch, the runtime reserve).
std::pair<int64_t, std::string> minimum_of(const MemoryPlanInputs& in, const Sizes& s) {
  int64_t need = 0;
  std::string detail;
  auto take = [&](int64_t bytes, std::string what) {
    if (bytes > need) need = bytes, detail = std::move(what);
  };
  // The layers on the device at the least: the smallest ring, or (not streaming) all of them.
  auto least = [&](int64_t layers, int64_t layer, const char* unit) -> std::pair<int64_t, std::string> {
    if (!in.stream_layers) return {layers * layer, fmt::format("its {} {} {:.1f}", layers, unit, gib(layers * layer))};
    const int64_t ring = std::min<int64_t>(layers, kMinRingSlots);
    return {ring * layer, fmt::format("a ring of {} x {:.2f}", ring, gib(layer))};
  };
  if (s.text) {
    const auto [bytes, what] = least(s.tb.layers, s.tb.layer, "layers");
    take(s.tb.base + in.vision_bytes + bytes + s.text_act,
         fmt::format("the encode phase: text embeddings {:.1f} + {} + activations {:.1f}{}", gib(s.tb.base), what,
                     gib(s.text_act),
                     in.vision_bytes > 0 ? fmt::format(" + vision tower {:.1f}", gib(in.vision_bytes)) : ""));
  }
  if (s.dit) {
    const auto [bytes, what] = least(s.db.blocks, s.db.block, "blocks");
    take(s.db.base + bytes + s.dit_act,
         fmt::format("the denoise phase: activations {:.1f} + {} + the DiT outside its blocks {:.1f}", gib(s.dit_act),
                     what, gib(s.db.base)));
  }
  if (s.vae) {
    const int64_t act = std::max(s.vd.fixed + s.vd.unit, s.audio_act);
    take(s.vae_weights + act,
         fmt::format("the decode phase: VAE decoders {:.1f} + activations {:.1f} at one unit a batch",
                     gib(s.vae_weights), gib(act)));
  }
  return {need + s.reserve, fmt::format("{} + runtime {:.1f} GiB", detail, gib(s.reserve))};
}

MemoryPlan build(const MemoryPlanInputs& in, const Sizes& s, KeptSet k) {
  MemoryPlan m;
  m.policy = in.policy;
  m.device_bytes = in.device_bytes;
  m.budget_bytes = s.budget;
  m.reserve_bytes = s.reserve;
  m.link_gbps = in.link_gbps;
  m.text_on_gpu = s.text;
  k.dit_blocks = s.dit ? std::clamp(k.dit_blocks, 0, s.db.blocks) : 0;
  k.text_layers = s.text ? static_cast<int>(std::clamp<int64_t>(k.text_layers, 0, s.tb.layers)) : 0;
  k.vaes = s.vae && k.vaes;
  m.kept = k;
  m.dit_weights = s.dit ? s.db.total() : 0;
  m.text_weights = s.text ? s.tb.total() : 0;
  m.vae_weights = s.vae_weights;
  m.dit_resident = s.dit && k.dit_blocks == s.db.blocks;
  m.text_resident = s.text && k.text_layers == s.tb.layers;
  m.vae_resident = k.vaes;
  const int64_t kd = k.dit_blocks > 0 ? s.db.base + int64_t{k.dit_blocks} * s.db.block : 0;
  const int64_t kt = k.text_layers > 0 ? s.tb.base + int64_t{k.text_layers} * s.tb.layer : 0;
  const int64_t kv = k.vaes ? s.vae_weights : 0;
  const int64_t kept = kd + kt + kv, room = s.room();
  bool ok = room > 0;
  PhaseMemory enc{"encode", "", kept};
  if (s.text) {
    const Layered t{"encode",   "text tower",  s.tb.base, in.vision_bytes, s.text_act, static_cast<int>(s.tb.layers),
                    s.tb.layer, k.text_layers, kt};
    enc = layered_phase(t, in, kept, room, m.text, ok);
  }
  enc.passes = 1;
  PhaseMemory den{"denoise", "", kept};
  if (s.dit) {
    const Layered d{"denoise", "DiT", s.db.base, 0, s.dit_act, s.db.blocks, s.db.block, k.dit_blocks, kd};
    den = layered_phase(d, in, kept, room, m.dit, ok);
  }
  den.passes = in.dit_calls;
  PhaseMemory dec{"decode", "", kept};
  if (s.vae) {
    dec.model = k.vaes ? "" : "VAEs";
    dec.weights = k.vaes ? 0 : s.vae_weights;
    const int64_t stack = room - (kept - kv) - s.vae_weights - s.vd.fixed;
    m.vae = VaeBudget{k.vaes, std::max<int64_t>(stack, 0), s.vd.batch_for(stack)};
    dec.activations = std::max(s.vd.at(stack), s.audio_act);
  }
  dec.passes = 1;
  m.phases = {enc, den, dec};
  plan_host(in, s, m);
  std::tie(m.minimum_bytes, m.minimum_detail) = minimum_of(in, s);
  m.host_limit_bytes = in.host_bytes;
  m.fits = ok && m.peak() <= room && (in.device_bytes <= 0 || s.budget <= in.device_bytes) && !m.host_short;
  return m;
}

// Why `m` does not fit, in the order a person fixes it.
std::string problem_of(const MemoryPlanInputs& in, const MemoryPlan& m) {
  if (in.device_bytes > 0 && m.budget_bytes > in.device_bytes)
    return fmt::format(
        "the budget of {:.1f} GiB is larger than the {:.1f} GiB free on this GPU: give --max-device-memory (or "
        "H3_MAX_DEVICE_MEMORY) at most {:.1f} GiB, or leave it out (what is free less {:.1f} GiB)",
        gib(m.budget_bytes), gib(in.device_bytes), gib(in.device_bytes), gib(kDefaultDeviceMargin));
  if (m.budget_bytes < m.minimum_bytes) {
    const std::string head =
        fmt::format("this request needs at least {:.1f} GiB of GPU memory at {} ({}); the budget is {:.1f} GiB",
                    gib_up(m.minimum_bytes), request_label(in), m.minimum_detail, gib(m.budget_bytes));
    if (in.device_bytes > 0 && m.minimum_bytes > in.device_bytes)
      return head + fmt::format(" and this GPU has {:.1f} GiB free", gib(in.device_bytes));
    return head + fmt::format(": give --max-device-memory {:.1f}GiB or more (the GPU needs that much free)",
                              gib_up(m.minimum_bytes));
  }
  for (const PhaseMemory& ph : m.phases)
    if (ph.peak() > m.room())
      return fmt::format(
          "the {} phase needs {:.1f} GiB at {} with {:.1f} GiB kept on the GPU between requests ({} + ring {:.1f} + "
          "activations {:.1f}) but the budget of {:.1f} GiB leaves {:.1f} beside the runtime's {:.1f}; alone this "
          "request needs at least {:.1f} GiB",
          ph.phase, gib(ph.peak()), request_label(in), gib(ph.resident), ph.model.empty() ? "its model" : ph.model,
          gib(ph.ring), gib(ph.activations), gib(m.budget_bytes), gib(m.room()), gib(m.reserve_bytes),
          gib_up(m.minimum_bytes));
  for (const PhaseMemory& ph : m.phases)
    if (ph.from_checkpoint && !pinned_copies_fit(ph.host_pinned, in.host_bytes))
      return fmt::format(
          "the {} phase streams the {}'s layers from the checkpoint (host memory given: {:.1f} GiB), and even its "
          "page-locked staging ring of {:.1f} GiB does not fit with {:.1f} GiB left free beside it: give more host "
          "memory (--host-memory) or free some, or keep more layers on the GPU",
          ph.phase, ph.phase == "encode" ? "text tower" : "DiT", gib(in.host_bytes), gib(ph.host_pinned),
          gib(kParkHostMarginBytes));
  return "the plan does not fit";
}

// auto: the most kept that fits (memory_plan.h).
MemoryPlan plan_auto(const MemoryPlanInputs& in, const Sizes& s) {
  const MemoryPlan none = build(in, s, {});
  if (!none.fits) return none;
  if (!in.stream_layers) {  // models that load whole are kept whole: {DiT, text, VAEs}, {DiT, VAEs}, {VAEs}, {}
    const int all_text = static_cast<int>(s.tb.layers);
    for (const KeptSet& k :
         {KeptSet{s.db.blocks, all_text, true}, KeptSet{s.db.blocks, 0, true}, KeptSet{0, 0, true}}) {
      MemoryPlan m = build(in, s, k);
      if (m.fits) return m;
    }
    return none;
  }
  KeptSet k;
  for (int d = none.dit.resident; d > 0 && k.dit_blocks == 0; --d)
    if (build(in, s, {d, 0, false}).fits) k.dit_blocks = d;
  MemoryPlan cur = build(in, s, k);
  if (s.vae) {
    const MemoryPlan p = build(in, s, {k.dit_blocks, 0, true});
    if (p.fits && p.dit.resident == cur.dit.resident) k.vaes = true, cur = p;
  }
  for (int t = cur.text.resident; t > 0; --t) {
    const MemoryPlan p = build(in, s, {k.dit_blocks, t, k.vaes});
    if (p.fits && p.dit.resident == cur.dit.resident) return p;
  }
  return cur;
}

MemoryPlan finish(const MemoryPlanInputs& in, MemoryPlan m) {
  if (!m.fits) m.problem = problem_of(in, m);
  return m;
}

}  // namespace

int64_t default_device_budget(int64_t free_bytes) {
  return std::max<int64_t>(free_bytes - kDefaultDeviceMargin, 0);
}

MemoryPlan plan_memory_kept(const MemoryPlanInputs& in, const KeptSet& kept) {
  return finish(in, build(in, sizes_of(in), kept));
}

MemoryPlan plan_memory_resident(const MemoryPlanInputs& in, bool dit, bool text, bool vae) {
  const Sizes s = sizes_of(in);
  return finish(in, build(in, s, {dit ? s.db.blocks : 0, text ? static_cast<int>(s.tb.layers) : 0, vae}));
}

MemoryPlan plan_memory(const MemoryPlanInputs& in) {
  const Sizes s = sizes_of(in);
  switch (in.policy) {
    case MemoryPolicy::resident:
      return finish(in, build(in, s, {s.db.blocks, static_cast<int>(s.tb.layers), true}));
    case MemoryPolicy::phases:
      return finish(in, build(in, s, {}));
    case MemoryPolicy::automatic:
      break;
  }
  return finish(in, plan_auto(in, s));
}

MemoryPlan plan_memory_or_suggest(const MemoryPlanInputs& in, const FramesGeometry& at_frames,
                                  const std::vector<int64_t>& frame_choices) {
  MemoryPlan m = plan_memory(in);
  if (m.fits || (in.device_bytes > 0 && m.budget_bytes > in.device_bytes)) return m;
  std::vector<std::string> would;
  auto fits = [](MemoryPlanInputs x) {
    if (x.policy == MemoryPolicy::resident) x.policy = MemoryPolicy::automatic;
    return plan_memory(x).fits;
  };
  if (in.policy == MemoryPolicy::resident && fits(in))
    would.push_back("--memory-plan auto (keep what fits between requests, stream the rest)");
  if (in.dit_on_gpu && in.dit_precision == Precision::bf16) {
    MemoryPlanInputs x = in;
    x.dit_precision = Precision::fp8;
    x.dit_forward_s = 0;
    if (fits(x)) would.push_back("--precision fp8");
  }
  const bool text_here = in.text_on_gpu && !in.text_elsewhere;
  if (text_here && m.phase("encode").peak() > m.room()) {
    MemoryPlanInputs x = in;
    if (in.text_precision == Precision::f32) {
      x.text_precision = Precision::bf16;
      if (fits(x)) would.push_back("--text-precision bf16");
    }
    x = in;
    x.text_on_gpu = false;
    if (fits(x)) would.push_back("--text-device cpu (the text tower on the CPU)");
  }
  if (at_frames) {
    for (int64_t f : frame_choices) {
      std::optional<MemoryPlanInputs> x = at_frames(f);
      if (!x) continue;
      x->device_bytes = in.device_bytes, x->budget_bytes = in.budget_bytes, x->reserve_bytes = in.reserve_bytes;
      x->policy = in.policy;
      if (fits(*x)) {
        would.push_back(fmt::format("--frames {} at this size", f));
        break;
      }
    }
  }
  for (int n = 2; n <= 64 && in.dit_on_gpu; n *= 2) {
    if (n <= in.K * in.U) continue;
    MemoryPlanInputs x = in;
    x.mode = DistMode::tensor, x.K = n, x.U = 1;
    if (!in.text_elsewhere)
      x.text_tp = static_cast<int>(std::min<int64_t>(n, std::max<int64_t>(in.text.n_kv_heads, 1)));
    x.dit_forward_s = in.dit_forward_s * in.K * in.U / n;
    if (fits(x)) {
      would.push_back(fmt::format("--ranks {} --mode tensor (each rank a GPU with this budget)", n));
      break;
    }
  }
  std::string list;
  for (size_t i = 0; i < would.size(); ++i) list += (i == 0 ? "" : i + 1 == would.size() ? " or " : ", ") + would[i];
  m.problem += would.empty() ? "; nothing smaller fits this budget: use a larger GPU, or spread the DiT over more GPUs "
                               "(--ranks N --mode tensor shards its weights)"
                             : "; would fit: " + list;
  return m;
}

}  // namespace h3

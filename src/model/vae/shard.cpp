// Sharded VAE decode; the assignment rule and the gathered layout are documented in model/vae/shard.h.
#include "model/vae/shard.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>
#include <string>

#include "core/error.h"

namespace h3 {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_between(Clock::time_point t0, Clock::time_point t1) {
  return std::chrono::duration<double>(t1 - t0).count();
}

// The caller's stats, when it asked for them: this rank's share, and the seconds from `start` to the gather, in
// the gather, and from `stitch` (the gather's end) to now.
void record_stats(ShardDecodeStats* stats, const ShardAssignment& as, int rank, Clock::time_point start,
                  Clock::time_point gather, Clock::time_point stitch) {
  if (!stats) return;
  stats->units = static_cast<int64_t>(as.units[rank].size());
  stats->cost = as.load[rank];
  stats->decode_s = seconds_between(start, gather);
  stats->gather_s = seconds_between(gather, stitch);
  stats->stitch_s = seconds_between(stitch, Clock::now());
}

// Every rank contributes (what it believes are) the number of units and the total gathered elements; a rank
// whose inputs differ would otherwise post mismatched counts and hang or corrupt the gather.
void agree_on_plan(Comm& comm, int64_t n_units, int64_t total, const std::string& what) {
  const int n = comm.size();
  if (n == 1) return;
  const int64_t mine[2] = {n_units, total};
  std::vector<int64_t> all(static_cast<size_t>(2 * n));
  comm.allgatherv(mine, all.data(), std::vector<int64_t>(n, 2), DType::i64, what + ": plan agreement");
  for (int r = 0; r < n; ++r)
    H3_CHECK(all[2 * r] == n_units && all[2 * r + 1] == total,
             "{}: rank {} ({}) plans {} units / {} elements but rank {} plans {} / {}; every rank must decode the "
             "same latents",
             what, comm.rank(), comm.host(), n_units, total, r, all[2 * r], all[2 * r + 1]);
}

// Gathers every rank's units (flattened, in ascending unit order) into all ranks' `recv`, per the layout in
// the header. `numel[u]` is unit u's element count, `mine[k]` the tensor of the k-th unit of this rank.
std::vector<std::byte> gather_units(Comm& comm, const ShardAssignment& as, const std::vector<int64_t>& numel,
                                    const std::vector<Tensor>& mine, DType dt, const std::string& what) {
  const int n = comm.size();
  const size_t es = dtype_size(dt);
  std::vector<int64_t> counts(n, 0);
  for (int r = 0; r < n; ++r)
    for (int64_t u : as.units[r]) counts[r] += numel[u];
  const int64_t total = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  agree_on_plan(comm, static_cast<int64_t>(numel.size()), total, what);
  // send = concat of this rank's units; one spare element keeps the pointers non-null when a part is empty.
  std::vector<std::byte> send(static_cast<size_t>(counts[comm.rank()]) * es + es);
  size_t off = 0;
  for (const Tensor& t : mine) {
    std::memcpy(send.data() + off, t.raw(), t.nbytes());
    off += t.nbytes();
  }
  H3_ASSERT(off == static_cast<size_t>(counts[comm.rank()]) * es, "{}: packed {} bytes, expected {}", what, off,
            counts[comm.rank()] * static_cast<int64_t>(es));
  std::vector<std::byte> recv(static_cast<size_t>(total) * es + es);
  comm.allgatherv(send.data(), recv.data(), counts, dt, what);
  return recv;
}

// Copies unit tensors out of the gathered buffer: decoded[u] for every u, shaped `shapes[u]`.
std::vector<Tensor> unpack_units(const std::vector<std::byte>& recv, const ShardAssignment& as,
                                 const std::vector<Shape>& shapes, DType dt) {
  std::vector<Tensor> decoded(shapes.size());
  size_t off = 0;
  for (int r = 0; r < as.ranks; ++r)
    for (int64_t u : as.units[r]) {
      Tensor t(dt, shapes[u]);
      std::memcpy(t.raw(), recv.data() + off, t.nbytes());
      off += t.nbytes();
      decoded[u] = std::move(t);
    }
  return decoded;
}

}  // namespace

ShardAssignment assign_balanced(const std::vector<int64_t>& costs, int ranks) {
  H3_CHECK(ranks >= 1, "sharded decode: {} ranks; need at least 1", ranks);
  ShardAssignment as;
  as.ranks = ranks;
  as.owner.assign(costs.size(), -1);
  as.units.assign(ranks, {});
  as.load.assign(ranks, 0);
  std::vector<int64_t> order(costs.size());
  std::iota(order.begin(), order.end(), int64_t{0});
  // Decreasing cost, ties by increasing index (stable sort over the ascending order).
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return costs[a] > costs[b]; });
  for (int64_t u : order) {
    H3_CHECK(costs[u] >= 0, "sharded decode: unit {} has negative cost {}", u, costs[u]);
    // min_element returns the first minimum: the lowest rank among the least loaded.
    const int r = static_cast<int>(std::min_element(as.load.begin(), as.load.end()) - as.load.begin());
    as.owner[u] = r;
    as.units[r].push_back(u);
    as.load[r] += costs[u];
    as.max_cost = std::max(as.max_cost, costs[u]);
  }
  for (auto& list : as.units) std::sort(list.begin(), list.end());
  return as;
}

std::vector<int64_t> video_unit_costs(const VideoDecodePlan& plan) {
  std::vector<int64_t> c;
  c.reserve(plan.units.size());
  for (const auto& u : plan.units) c.push_back((u.t1 - u.t0) * (u.y1 - u.y0) * (u.x1 - u.x0));
  return c;
}

Tensor decode_video_sharded(const VideoVae& vae, const Tensor& z, Comm& comm, ShardDecodeStats* stats) {
  const auto t_start = Clock::now();
  const VideoDecodePlan plan = vae.plan_decode(z.shape());
  const ShardAssignment as = assign_balanced(video_unit_costs(plan), comm.size());
  const VideoVaeConfig& cfg = vae.config();
  const int64_t q = cfg.temporal_ratio(), rs = cfg.spatial_ratio();
  const DType dt = vae.compute_dtype();
  std::vector<Shape> shapes;
  std::vector<int64_t> numel;
  for (const auto& u : plan.units) {
    shapes.push_back({cfg.out_channels, q * (u.t1 - u.t0), rs * (u.y1 - u.y0), rs * (u.x1 - u.x0)});
    numel.push_back(shape_numel(shapes.back()));
  }
  const auto& my_units = as.units[comm.rank()];
  std::vector<Tensor> mine;
  if (!my_units.empty()) {
    const Tensor zp = vae.pad_latents(z, plan);
    // Stacked like the 1-rank decode (decode_blocks: each unit's bits do not depend on its batch companions).
    std::vector<VideoDecodeUnit> units;
    for (int64_t u : my_units) units.push_back(plan.units[u]);
    std::vector<Tensor> decoded = vae.decode_units_on_device(zp, units);
    for (size_t k = 0; k < my_units.size(); ++k) {
      const int64_t u = my_units[k];
      Tensor d = decoded[k].on_device() ? decoded[k].cpu() : std::move(decoded[k]);
      H3_ASSERT(d.dtype() == dt && d.shape() == shapes[u],
                "video VAE sharded decode: unit {} decoded to {}, "
                "expected {}{}",
                u, d.describe(), dtype_name(dt), shape_str(shapes[u]));
      mine.push_back(std::move(d));
    }
  }
  const auto t_gather = Clock::now();
  const std::vector<std::byte> recv = gather_units(comm, as, numel, mine, dt, "video VAE sharded decode");
  mine.clear();
  const auto t_stitch = Clock::now();
  // A GPU VAE stitches on its device (bitwise the host stitch, see VideoVae::stitch_on_device).
  const std::vector<Tensor> all_units = unpack_units(recv, as, shapes, dt);
  Tensor video = vae.device() == Device::cpu ? vae.stitch(plan, all_units) : vae.stitch_on_device(plan, all_units);
  record_stats(stats, as, comm.rank(), t_start, t_gather, t_stitch);
  return video;
}

Tensor decode_audio_sharded(const AudioVae& vae, const Tensor& latents, Comm& comm, ShardDecodeStats* stats) {
  const auto t_start = Clock::now();
  const AudioVaeConfig& cfg = vae.config();
  H3_CHECK(latents.ndim() == 3 && latents.dim(1) == cfg.latent_channels && latents.dim(2) > 0,
           "audio VAE sharded decode: latents must be [batch, {}, frames] (stereo = 2 batch items), got {}",
           cfg.latent_channels, latents.describe());
  const int64_t B = latents.dim(0), C = latents.dim(1), A = latents.dim(2);
  const ShardAssignment as = assign_balanced(std::vector<int64_t>(B, A), comm.size());
  const DType dt = vae.compute_dtype();
  const std::vector<Shape> shapes(B, Shape{1, 1, A * cfg.hop()});
  const std::vector<int64_t> numel(B, A * cfg.hop());
  const auto& my_items = as.units[comm.rank()];
  std::vector<Tensor> mine;
  if (!my_items.empty()) {
    // This rank's items as one batch [k, C, A] (item b of [B, C, A] is C * A contiguous elements).
    const int64_t k = static_cast<int64_t>(my_items.size());
    Tensor part(latents.dtype(), {k, C, A});
    const size_t item_bytes = static_cast<size_t>(C * A) * dtype_size(latents.dtype());
    for (int64_t i = 0; i < k; ++i)
      std::memcpy(static_cast<std::byte*>(part.raw()) + i * item_bytes,
                  static_cast<const std::byte*>(latents.raw()) + my_items[i] * item_bytes, item_bytes);
    const Tensor out = vae.decode(part);
    H3_ASSERT(out.dtype() == dt && out.shape() == (Shape{k, 1, A * cfg.hop()}),
              "audio VAE sharded decode: decoded {}, expected {}[{}, 1, {}]", out.describe(), dtype_name(dt), k,
              A * cfg.hop());
    for (int64_t i = 0; i < k; ++i) {
      Tensor item(dt, shapes[my_items[i]]);
      std::memcpy(item.raw(), static_cast<const std::byte*>(out.raw()) + i * item.nbytes(), item.nbytes());
      mine.push_back(std::move(item));
    }
  }
  const auto t_gather = Clock::now();
  const std::vector<std::byte> recv = gather_units(comm, as, numel, mine, dt, "audio VAE sharded decode");
  mine.clear();
  const auto t_stitch = Clock::now();
  // Items come back in rank order; place item b at batch row b.
  Tensor wave(dt, {B, 1, A * cfg.hop()});
  const std::vector<Tensor> items = unpack_units(recv, as, shapes, dt);
  for (int64_t b = 0; b < B; ++b)
    std::memcpy(static_cast<std::byte*>(wave.raw()) + b * items[b].nbytes(), items[b].raw(), items[b].nbytes());
  record_stats(stats, as, comm.rank(), t_start, t_gather, t_stitch);
  return wave;
}

}  // namespace h3

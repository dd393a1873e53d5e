// DiT weight streaming (model/dit/streaming.h): which blocks stay resident, the parking of the others as they load,
// their leases in the forward and the modulation tables of the streamed blocks.
#include "model/dit/streaming.h"

#include <algorithm>
#include <exception>
#include <utility>

#include "core/byte_size.h"
#include "core/error.h"
#include "core/log.h"
#include "ops/ops.h"

namespace h3 {

namespace {
constexpr const char* kLorasAreMerged = "LoRAs are merged into its weights";
}  // namespace

// The tensors kDitStreamedTensors names for the block at `prefix`, as this rank holds them (dit.cpp's load_block
// reads the same rows and columns): q/k/v rows of its heads, out columns of its heads, the FFN's value and gate rows
// of its columns, fc2 columns, AdaLN rows. GPU: FP8 GEMM weights in an fp8 run (fp8_layers_), the rest bf16; CPU: the
// compute dtype.
std::vector<DitModel::StreamedTensor> DitModel::streamed_tensors(const std::string& p) const {
  const bool gpu = dev_ != Device::cpu;
  const int64_t D = config_.attention_head_dim, H = config_.hidden_size, F = config_.ffn_dim;
  const int64_t E = config_.time_embed_dim, heads = config_.num_attention_heads;
  auto dt = [&](bool fp8_ok) {
    return !gpu ? ct_ : precision_ == Precision::fp8 && fp8_ok ? DType::fp8_e4m3 : DType::bf16;
  };
  const RowRange qkv{heads_qkv_.begin * D, heads_qkv_.end * D}, out{heads_out_.begin * D, heads_out_.end * D};
  const RowRange ffn{ffn_.begin, ffn_.end}, gate{F + ffn_.begin, F + ffn_.end}, ada{ada_rows_.begin, ada_rows_.end};
  const bool sq = heads_qkv_.size() != heads, so = heads_out_.size() != heads, sf = ffn_.size() != F,
             sa = ada_rows_.size() != 18 * H;
  std::vector<StreamedTensor> t = {
      {p + "attn.to_q.weight", {qkv}, {}, {qkv.size(), H}, dt(fp8_layers_.qkv), sq},
      {p + "attn.to_k.weight", {qkv}, {}, {qkv.size(), H}, dt(fp8_layers_.qkv), sq},
      {p + "attn.to_v.weight", {qkv}, {}, {qkv.size(), H}, dt(fp8_layers_.qkv), sq},
      {p + "attn.to_out.0.weight", {{0, H}}, out, {H, out.size()}, dt(fp8_layers_.out), so},
      {p + "ff.net.0.proj.weight", {ffn, gate}, {}, {2 * ffn.size(), H}, dt(fp8_layers_.ff_in), sf},
      {p + "ff.net.2.weight", {{0, H}}, ffn, {H, ffn.size()}, dt(fp8_layers_.ff_out), sf},
      {p + "adaln_proj.linear.weight", {ada}, {}, {ada.size(), E}, dt(false), sa},
      {p + "adaln_proj.linear.bias", {ada}, {}, {ada.size()}, dt(false), sa}};
  H3_ASSERT(t.size() == kDitStreamedTensors.size(), "DiT: {} streamed tensors named, {} travel", t.size(),
            kDitStreamedTensors.size());
  return t;
}

// The spans are the device's bytes when the device would take the stored tensor as it is: the same dtype (the CPU
// computes in f32 or f64; the GPU holds bf16, or FP8 e4m3 with the file's per-tensor scale), no conversion, no
// LoRA merged, no per-row FP8 scales (deterministic mode re-quantizes per row). The qkv split and fc1 swap of the
// released layouts are row ranges of the stored tensors (stored_read), so every layout maps.
std::optional<MappedTensor> DitModel::map_tensor(const DitCheckpoint& ck, const StreamedTensor& t, std::string& why,
                                                 bool with_scale) const {
  if (!ck.loras().empty()) {
    why = kLorasAreMerged;
    return std::nullopt;
  }
  if (ck.layout() == DitLayout::procedural) {
    why = "procedural weights are generated where they load, not stored (h3 convert writes them to a file)";
    return std::nullopt;
  }
  if (dev_ == Device::cpu && precision_ == Precision::bf16) {
    why = "the CPU's bf16 recipe holds f32 weights rounded to bf16, which no stored tensor is";
    return std::nullopt;
  }
  const auto sr = ck.stored_read(t.key, t.rows, t.cols);
  if (!sr) {
    why = fmt::format("'{}' is stored as {} in a format the host converts", t.key, dtype_name(ck.stored_dtype(t.key)));
    return std::nullopt;
  }
  const DType stored = sr->read.dtype;
  if (t.dtype == DType::fp8_e4m3) {
    if (sr->fp8_scale == 0 || stored != DType::fp8_e4m3) {
      why = fmt::format("'{}' is stored {}, an FP8 run holds FP8 e4m3 with a per-tensor scale", t.key,
                        dtype_name(stored));
      return std::nullopt;
    }
    if (numerics_.fp8_row_scales()) {
      why = fmt::format("deterministic mode scales FP8 weights per row, '{}' is stored with one scale", t.key);
      return std::nullopt;
    }
  } else if (sr->fp8_scale != 0 || stored != t.dtype) {
    why = fmt::format("'{}' is stored {}{}, this run holds it in {}", t.key, dtype_name(stored),
                      sr->fp8_scale != 0 ? " with a scale" : "", dtype_name(t.dtype));
    return std::nullopt;
  }
  H3_ASSERT(sr->read.shape == t.shape, "DiT: '{}' read as {}, held as {}", t.key, shape_str(sr->read.shape),
            shape_str(t.shape));
  MappedTensor m{sr->read, Tensor()};
  if (with_scale && sr->fp8_scale != 0)
    m.scale = Tensor::from(std::vector<float>{sr->fp8_scale}, {1}).to_device(dev_);  // as dit.cpp's direct() has it
  return m;
}

bool DitModel::plan_streaming(const DitStreaming& s) {
  const int n = config_.num_layers;
  H3_CHECK(s.resident_blocks >= -1,
           "DiT streaming: {} resident blocks asked for; give 0..{} (the others stream from host memory) or -1 "
           "(all resident)",
           s.resident_blocks, n);
  if (s.resident_blocks < 0 || s.resident_blocks >= n) return false;
  H3_CHECK(s.ring_slots >= 1,
           "DiT streaming: a ring of {} slots; give at least 1 (2 or more overlap copies with compute)", s.ring_slots);
  resident_ = spread_resident(n, s.resident_blocks);
  park_source_ = s.source;
  return true;
}

void DitModel::check_mapped_source(const DitStreaming& s, const DitCheckpoint& ck, bool loras) const {
  if (park_source_ != ParkSource::mapped) return;
  int64_t park_bytes = 0;
  std::string problem = loras ? std::string(kLorasAreMerged) : std::string();
  for (int b = 0; b < config_.num_layers; ++b) {
    if (!block_streamed(static_cast<size_t>(b))) continue;
    std::vector<Shape> shapes;
    std::vector<DType> dtypes;
    for (const StreamedTensor& t : streamed_tensors("transformer_blocks." + std::to_string(b) + ".")) {
      shapes.push_back(t.shape);
      dtypes.push_back(t.dtype);
      std::string why;
      if (problem.empty() && !map_tensor(ck, t, why, false)) problem = why;
    }
    park_bytes += static_cast<int64_t>(LayerStreamer::record_bytes(shapes, dtypes));
  }
  if (!problem.empty()) fail_unmappable("DiT", park_bytes, s.host, fmt::format("{} ({})", problem, ck.path()));
}

void DitModel::start_streaming(const DitStreaming& s, const DitCheckpoint& ck) {
  if (!plan_streaming(s)) return;
  // Every streamed tensor is checked against the file before anything loads: a refusal costs no load.
  check_mapped_source(s, ck, false);
  LayerStreamer::Options opt;
  opt.slots = s.ring_slots;
  // The summary is logged once, when the model (and every copy of it) is gone.
  streamer_ =
      std::shared_ptr<LayerStreamer>(new LayerStreamer(dev_, "DiT", config_.num_layers, opt), [](LayerStreamer* p) {
        spdlog::info("DiT weight streaming: {}", p->stats().summary());
        delete p;
      });
}

void DitModel::check_streaming(const DitCheckpoint& ckpt, Precision precision, const DistPlan& plan, Device device,
                               const Numerics& numerics, const DitStreaming& streaming, bool loras) {
  DitModel m(HeadersOnly{}, ckpt, precision, plan, device, numerics);
  m.plan_rank();
  if (m.plan_streaming(streaming)) m.check_mapped_source(streaming, ckpt, loras);
}

// A streamed block read from the checkpoint at each copy: its tensors become spans of the file (nothing of them is
// read now); the file stays open as long as the streamer.
std::vector<DitModel::StreamedTensor> DitModel::park_block_mapped(size_t n, const DitCheckpoint& ck,
                                                                  const std::string& prefix) {
  std::vector<StreamedTensor> specs = streamed_tensors(prefix);
  std::shared_ptr<const void> files = ck.keep_files();
  std::vector<MappedTensor> tensors;
  for (const StreamedTensor& t : specs) {
    std::string why;
    std::optional<MappedTensor> m = map_tensor(ck, t, why, true);
    H3_ASSERT(m.has_value(), "DiT block {}: checked as mappable, now not: {}", n, why);
    m->owner = files;
    tensors.push_back(std::move(*m));
  }
  streamer_->park_mapped(static_cast<int>(n), std::move(tensors));
  return specs;
}

// Moves block n's large tensors into the streamer: its page-locked host record holds their bytes, and the device
// memory goes back as the last reference goes (the loader holds none), so loading peaks at the resident blocks
// plus one.
void DitModel::park_block(size_t n) {
  Block& b = blocks_[n];
  std::vector<Tensor> tensors;
  tensors.reserve(kDitStreamedTensors.size());
  for (Tensor Block::*field : kDitStreamedTensors) {
    tensors.push_back(std::move(b.*field));
    b.*field = Tensor();
  }
  streamer_->park(static_cast<int>(n), std::move(tensors));
}

void DitModel::finish_streaming() {
  if (!streamer_) return;
  streamer_->start();  // the first copies run during the first prologue
  const LayerStreamStats s = streamer_->stats();
  spdlog::info(
      "DiT: {} of {} blocks resident, {} streamed through {} slots of {} on the device, {}", resident_blocks(),
      config_.num_layers, s.streamed, s.slots,
      format_byte_size(static_cast<int64_t>(s.slot_bytes / std::max(s.slots, 1))),
      park_source_ == ParkSource::mapped
          ? fmt::format("read from the checkpoint at each copy ({}; {} page-locked staging)",
                        format_byte_size(static_cast<int64_t>(s.mapped_bytes)),
                        format_byte_size(static_cast<int64_t>(s.staging_bytes)))
          : fmt::format("from page-locked copies ({})", format_byte_size(static_cast<int64_t>(s.parked_bytes))));
}

int DitModel::resident_blocks() const {
  if (resident_.empty()) return config_.num_layers;
  int r = 0;
  for (bool b : resident_) r += b ? 1 : 0;
  return r;
}

void DitModel::stop_streaming() {
  if (streamer_) streamer_->stop();
}

void DitModel::start_streaming_copies() {
  if (streamer_) streamer_->start();
}

LayerStreamStats DitModel::streaming_stats() const {
  if (streamer_) return streamer_->stats();
  LayerStreamStats s;
  s.layers = config_.num_layers;
  return s;
}

DitModel::BlockLease::BlockLease(const DitModel& m, size_t n) : n_(static_cast<int>(n)) {
  if (!m.block_streamed(n)) {
    block_ = &m.blocks_[n];
    return;
  }
  streamer_ = m.streamer_.get();
  streamed_ = m.blocks_[n];  // the resident norms and scales
  std::vector<Tensor> w = streamer_->acquire(n_);
  for (size_t i = 0; i < kDitStreamedTensors.size(); ++i) streamed_.*kDitStreamedTensors[i] = std::move(w[i]);
  block_ = &streamed_;
}

DitModel::BlockLease::~BlockLease() {
  if (!streamer_) return;
  try {
    streamer_->release(n_);
  } catch (const std::exception& e) {
    spdlog::error("DiT block {}: releasing its streamed weights failed: {}", n_, e.what());
  }
}

// A streamed block's table, computed once its weights are on the device: the same kernel on the same bytes as
// adaln_tables gives a resident block, and in tensor mode the same gather of each rank's rows (one per streamed
// block, in block order on every rank, after the resident blocks' one).
Tensor DitModel::block_table(const Block& b, const Tensor& ada_in) const {
  Tensor own = round_if_bf16(ops::linear(ada_in, b.adaln_w, &b.adaln_b));
  if (plan_.K == 1) return own;
  return gather_tables({std::move(own)}).front();
}

}  // namespace h3

// The MiniMax-H3 DiT forward over one packed sequence [text | conditions | audio | video] (h3-model-spec §2.3):
// input projections, token refiner on the text rows, scatter into the packed buffer, the AdaLN-modulated blocks with
// 3-axis partial RoPE, the final modulated norm and the two output heads.
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/numerics.h"
#include "distributed/host_stage.h"
#include "distributed/plan.h"
#include "io/layer_stream.h"
#include "model/dit/checkpoint.h"
#include "model/dit/config.h"
#include "model/dit/fp8_layers.h"
#include "model/dit/hooks.h"

namespace h3 {

struct DitInputs {
  Tensor video;             // [Nv, in_channels*4] patchified rows (conditions first), f32
  Tensor audio;             // [Na, audio_in_channels], f32
  Tensor text;              // [L, text_dim], f32
  Tensor timestep;          // [M] distinct timesteps in [0, 1] (1 = clean), f32
  Tensor timestep_indices;  // [S] i64, index into timestep per packed row
  Tensor token_tags;        // [S] i64, 0 video, 1 text, 2 audio
  Tensor position_ids;      // [S, 3] (t, h, w), f64
  Tensor video_indices;     // [Nv] i64 packed row of each video row
  Tensor audio_indices;     // [Na] i64
  Tensor text_indices;      // [L] i64
  // Throws naming the input and what is allowed when shapes, dtypes or indices are inconsistent.
  void validate(const DitConfig& c) const;
  int64_t seq_len() const { return position_ids.dim(0); }
};

struct DitOutputs {
  Tensor video;  // [Nv, in_channels*4] velocity, f32 for bf16/f32 runs, f64 for f64 runs
  Tensor audio;  // [Na, audio_in_channels]
  // Named intermediates when requested (DitCapture, model/dit/hooks.h): "token_refiner" [L,H], "block.N" [S,H],
  // "norm_out" [S,H].
  std::map<std::string, Tensor> activations;
};

// What one rank of a plan holds: its head, FFN and AdaLN ranges, and the bytes of weights and of the largest
// activations (analytic, from the config; the model checks its loaded bytes against it).
struct DitShard {
  Range heads_qkv, heads_out, ffn, ada_rows;
  int64_t replicated_params = 0, sharded_params = 0;
  int64_t largest_activation_elems = 0;  // for a packed length S
  static DitShard of(const DitConfig& c, DistMode mode, int K, int U, int t, int u, int world, int64_t S);
};

// DiT weight streaming (issue 37): how many transformer blocks keep their weights on the device. The others' large
// per-block tensors (the q/k/v/out and FFN GEMM weights, FP8 ones as FP8 with their scales staying on the device,
// and the AdaLN weight and bias) are parked in host memory as each block loads, and copied into a ring of
// `ring_slots` device buffers ahead of the block that needs them (io/layer_stream.h); the norms stay resident.
// Which blocks stay: spread_resident(num_layers, resident_blocks). The same kernels run on the same bytes, so the
// outputs are bitwise those of the resident model. Every rank of a plan must pass the same values.
// Where the streamed blocks wait (`source`, the memory plan's choice: io/layer_stream.h's rule): page-locked copies
// in host memory (pinned), or the checkpoint itself, read through a page-locked staging ring at each copy (mapped:
// for hosts whose memory cannot hold the copies). Mapped needs the checkpoint's stored bytes to be the device's
// (an FP8 file for an FP8 run with per-tensor scales, a bf16 file for a bf16 run, f32 for the CPU's f32; no LoRAs);
// otherwise the model is refused before any weight loads, naming the tensor (`host`: the host memory the plan had,
// for that message). The checkpoint's files stay open while the model streams.
struct DitStreaming {
  int resident_blocks = -1;  // -1 (or num_layers and more): every block resident, no streaming; else 0..num_layers-1
  int ring_slots = 3;        // device buffers of one block each: one in use, ring_slots - 1 copies in flight
  ParkSource source = ParkSource::pinned;
  HostMemory host = {};
};

// Weights of one rank, in the compute dtype. With a distributed plan the rank keeps only its slices:
//   q/k/v rows of its heads (H_t in tensor/hybrid, H_u in ulysses-ag), out_proj columns of H_t, the FFN value and
//   gate rows of its columns F_t (kept as [value_slice; gate_slice]), fc2 columns F_t, AdaLN rows A_t of the 18H
//   outputs. Everything else (projections, refiner, norms, final layer) is replicated.
class DitModel {
 public:
  // device: where the weights live and the forward runs (Device::cuda needs the GPU backend started, and
  // precision bf16 or fp8). Inputs and outputs are host tensors either way. numerics: how the fp8 recipe scales and
  // attends (the GPU backend's own, core/numerics.h); no effect on the CPU.
  // streaming: how many transformer blocks stay on the device (DitStreaming; default: all).
  DitModel(const DitCheckpoint& ckpt, Precision precision, const DistPlan& plan = DistPlan::single(),
           Device device = Device::cpu, const Numerics& numerics = {}, const DitStreaming& streaming = {});
  // The constructor's checks of these arguments from the checkpoint's headers alone, nothing loaded: throws what
  // the constructor would throw for the device, the precision or the streaming (a mapped source whose stored bytes
  // are not the device's; `loras`: LoRAs will be merged, which a mapped source refuses). The generator asks before
  // its first phase, so that such a refusal does not wait for the DiT's load after the encode.
  static void check_streaming(const DitCheckpoint& ckpt, Precision precision, const DistPlan& plan, Device device,
                              const Numerics& numerics, const DitStreaming& streaming, bool loras);
  // Runs one forward. Every rank calls it with the same inputs; every rank gets the full outputs (and, when asked,
  // the full activations). keep_activations keeps every named intermediate (DitCapture::all()); `capture` the
  // ones it names (the same on every rank). Neither changes the outputs.
  DitOutputs forward(const DitInputs& in, bool keep_activations = false) const;
  DitOutputs forward(const DitInputs& in, const DitCapture& capture) const;
  const DitConfig& config() const { return config_; }
  Precision precision() const { return precision_; }
  Device device() const { return dev_; }
  const Numerics& numerics() const { return numerics_; }
  const DistPlan& plan() const { return plan_; }
  // Which block GEMMs run in FP8 (precision fp8 on the GPU, model/dit/fp8_layers.h); none in other precisions.
  const DitFp8Layers& fp8_layers() const { return fp8_layers_; }
  // Bytes of weights this rank holds, split into replicated and sharded parts.
  size_t replicated_bytes() const { return replicated_bytes_; }
  size_t sharded_bytes() const { return sharded_bytes_; }
  // How the weights were loaded (io/device_loader.h: bytes read, seconds, GB/s; tensors generated in place).
  const LoadReport& load_report() const { return load_report_; }
  // Transformer blocks whose weights stay on the device (num_layers without streaming), and the streamer's figures
  // (zeros without streaming; the summary is logged once when the model goes).
  int resident_blocks() const;
  LayerStreamStats streaming_stats() const;
  // Between requests of a DiT that stays loaded: its streamed blocks' ring goes back to the device (LayerStreamer::
  // stop); the next forward takes it again. A no-op without streaming.
  void stop_streaming();
  // The ring taken again and its first copies queued now, so that they run during the next forward's prologue
  // (the first acquire does it otherwise). A no-op without streaming or when the ring is held.
  void start_streaming_copies();

  struct Block {
    Tensor norm1, to_q, to_k, to_v, norm_q, norm_k, to_out, norm2, ff_in, ff_out;
    Tensor adaln_w, adaln_b;  // undefined for refiner blocks
    // FP8 attention: fixed per-tensor scales of the normed, rotated q and k, from the norm weights alone, and the
    // bounds on a head's norm in e4m3 units that they give (model/dit/fp8_qk.h).
    Tensor q8_scale, k8_scale;
    float q8_norm_bound = 0, k8_norm_bound = 0;
  };

 private:
  // Construction (model/dit/load.cpp): checks (device, precision), this rank's plan (its slices, the FP8 layers),
  // then the loads (LoRA agreement, every weight, streamed blocks parked).
  struct HeadersOnly {};  // the checks only, no weights (check_streaming's model; every constructor starts with it)
  DitModel(HeadersOnly, const DitCheckpoint& ckpt, Precision precision, const DistPlan& plan, Device device,
           const Numerics& numerics);
  void check_setup() const;
  DitShard plan_rank();
  void load_weights(const DitCheckpoint& ck, const DitStreaming& streaming, const DitShard& shard);
  struct Step;       // per-forward state (model/dit/forward.cpp)
  class BlockLease;  // a block's weights while its kernels are queued (model/dit/streaming.h)
  Tensor round_if_bf16(Tensor t) const;
  // Whether element-wise ops round their intermediates through bf16 (the bf16 and fp8 recipes).
  bool bf16_steps() const { return precision_ == Precision::bf16 || precision_ == Precision::fp8; }
  // Host tensor -> the model's device in the compute dtype (f32 / f64); and back to host f32 / f64.
  Tensor upload(const Tensor& t) const;
  Tensor to_host(const Tensor& t) const;
  // The phases of forward(): setup (rank agreement, row partition, RoPE tables), prologue (token refiner, input
  // projections, time embedding, modulation tables), the blocks with the final norm, one output head.
  void prepare_step(const DitInputs& in, Step& st) const;
  Tensor prologue(const DitInputs& in, Step& st, const DitCapture& capture, DitOutputs& out) const;
  Tensor run_blocks(Tensor x, Step& st, const DitCapture& capture, DitOutputs& out) const;
  Tensor output_head(const Tensor& h, const Tensor& idx, const Tensor& w, const Tensor& bias, const Step& st) const;
  Tensor attention_block(const Block& b, const Tensor& h, Step& st) const;
  Tensor mlp_block(const Block& b, const Tensor& h, Step& st) const;
  Tensor refiner_attention(const Block& b, const Tensor& h) const;
  Tensor refiner_mlp(const Block& b, const Tensor& h) const;
  // Every resident block's modulation table (undefined for streamed blocks: block_table computes theirs when their
  // weights are on the device), and the tensor-parallel all-gather that assembles tables from each rank's rows.
  std::vector<Tensor> adaln_tables(const Tensor& ada_in) const;
  std::vector<Tensor> gather_tables(const std::vector<Tensor>& own) const;
  Tensor block_table(const Block& b, const Tensor& ada_in) const;
  // Streaming (model/dit/streaming.cpp): the streamer for `s` before anything loads (for the mapped source, every
  // streamed block checked against the checkpoint first), a loaded block's large tensors parked, or a block's
  // tensors parked as spans of the checkpoint (park_block_mapped: the block loads its norms only; returns what the
  // parked tensors are, for the model's accounts), the ring started after loading.
  struct StreamedTensor {
    std::string key;             // the parameter (diffusers name)
    std::vector<RowRange> rows;  // this rank's rows of it (all when empty)
    RowRange cols;               // and columns (all when empty)
    Shape shape;                 // the tensor the device holds
    DType dtype = DType::f32;    // ... and its dtype
    bool sharded = false;        // a slice of the parameter (the plan's sharded account)
  };
  std::vector<StreamedTensor> streamed_tensors(const std::string& prefix) const;  // kDitStreamedTensors' order
  // The checkpoint spans of one streamed tensor as the device holds it, or the reason they are not its bytes.
  std::optional<MappedTensor> map_tensor(const DitCheckpoint& ck, const StreamedTensor& t, std::string& why,
                                         bool with_scale) const;
  void start_streaming(const DitStreaming& s, const DitCheckpoint& ck);
  // Which blocks stay (resident_) and where the others wait (park_source_); false when nothing streams.
  bool plan_streaming(const DitStreaming& s);
  // The mapped source's check: every streamed tensor readable from the file as the device holds it, else refused.
  void check_mapped_source(const DitStreaming& s, const DitCheckpoint& ck, bool loras) const;
  void park_block(size_t n);
  std::vector<StreamedTensor> park_block_mapped(size_t n, const DitCheckpoint& ck, const std::string& prefix);
  void finish_streaming();
  bool block_mapped(size_t n) const { return block_streamed(n) && park_source_ == ParkSource::mapped; }
  bool block_streamed(size_t n) const { return !resident_.empty() && !resident_[n]; }
  // `v` as an i32 index tensor where the model's ops run: on the GPU uploaded once per distinct content and kept
  // (every step of a request has the same layout, and each host-to-device copy waits for the queued work).
  Tensor device_index(const std::vector<int32_t>& v) const;

  DitConfig config_;
  Precision precision_;
  DType ct_;  // compute dtype (f64 or f32); on the GPU the bf16 layers' activations are bf16
  Device dev_ = Device::cpu;
  Numerics numerics_;
  DistPlan plan_;
  DitFp8Layers fp8_layers_;
  Range heads_qkv_, heads_out_, ffn_, ada_rows_;
  size_t replicated_bytes_ = 0, sharded_bytes_ = 0;
  LoadReport load_report_;
  mutable uint64_t op_id_ = 0;     // forwards run so far; agreed between ranks
  mutable uint64_t rope_key_ = 0;  // hash of the positions the cached RoPE tables belong to
  mutable Tensor rope_cos_, rope_sin_;
  struct CachedIndex {
    std::vector<int32_t> host;
    Tensor dev;
  };
  mutable std::unordered_map<uint64_t, CachedIndex> index_cache_;  // device_index's uploads, by content hash
  Tensor proj_in_w, proj_in_b, audio_in_w, audio_in_b, ctx_w, ctx_b;
  Tensor t1_w, t1_b, t2_w, t2_b;
  std::vector<Block> refiner_, blocks_;
  std::vector<bool> resident_;               // per block, when streaming (empty: all resident)
  std::shared_ptr<LayerStreamer> streamer_;  // shared: the forward is const and DitModel stays copyable
  // Host buffers of the exchanges over MPI (distributed/host_stage.h), kept across forwards; shared as streamer_.
  std::shared_ptr<HostStage> stage_ = std::make_shared<HostStage>();
  ParkSource park_source_ = ParkSource::pinned;
  Tensor refiner_norm_, out_norm_, out_ada_w_, out_ada_b_, proj_out_w_, proj_out_b_, audio_out_w_, audio_out_b_;
};

// Throws on every rank (naming the ranks that differ from rank 0) unless all ranks of the plan loaded the same
// LoRAs; the DitModel constructor calls it.
void check_lora_agreement(const DitCheckpoint& ck, const DistPlan& plan);

// The sinusoidal timestep embedding [M, freq_dim] = [cos(t f_k) | sin(t f_k)], f_k = exp(-ln(1e4) k / half),
// always computed in f32 as the reference does.
Tensor timestep_embedding(const Tensor& timestep, int freq_dim);
// The entries of an integer index tensor (i32 or i64, any device), read in one typed pass.
std::vector<int64_t> index_values(const Tensor& t);
// RoPE tables [S, 6*rope_freq_dim] in dtype `dt` (positions and inverse frequencies rounded to f32 first).
void rope_tables(const Tensor& position_ids, const DitConfig& c, DType dt, Tensor& cos, Tensor& sin);

}  // namespace h3

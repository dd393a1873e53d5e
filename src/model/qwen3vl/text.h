// The Qwen3-VL text decoder as H3's text conditioner, on the CPU (f32 or f64) or the GPU (bf16 or f32), on one rank or
// tensor-parallel over a communicator: token embeddings, then decoder layers of causal grouped-query attention
// (per-head q/k RMSNorm, interleaved mRoPE) and a SwiGLU MLP, each with a pre-RMSNorm and a residual.
// hidden_states[0] is the embedding output and hidden_states[k] the output of decoder layer k-1; H3 conditions
// on hidden_states[50], unnormalised, so only the first 50 layers are loaded.
//
// Tensor parallelism (model/qwen3vl/text_tp.cpp has the index equations). The work of a layer is cut into G units,
// G = n_kv_heads (8 at full size): unit g = KV head g with its n_heads/G query heads (q/k/v rows, o_proj
// columns) plus FFN chunk g (part g of the intermediate columns by the partition rule: up/gate rows, down_proj
// columns). Each unit gives a partial [N, hidden] of the attention (and of the MLP) output; the residual adds
// ((P_0 + P_1) + P_2) + ... + P_{G-1}, folded in unit order. Ranks own contiguous ragged runs of units
// (rank r of T: units part_of(G, T, r)), compute their partials, and the fold runs on element slices after an
// all-to-all, then an all-gather. Every unit is computed the same way whatever T is (its GEMMs have the same shapes
// on any T, every row kernel reduces a row alone) and the fold order never changes, so the hidden states are bitwise
// the same on 1..G ranks (CPU; on the GPU in deterministic mode, where each GEMM shape has one pinned algorithm, or
// whenever the tuned algorithms agree): the embeddings, hence the latents, do not depend on the encoder rank count.
// More ranks than KV heads: ranks >= G hold no weights, and receive the outputs by broadcast. Embeddings and norms
// are replicated; each rank reads only its units' slices.
//
// Precision flow: as in the project's other golden sets, inv_freq and the positions are rounded to f32, then
// the angles, cos/sin and everything else are computed in the run's dtype (f32 or f64). transformers itself
// takes cos/sin and the RMSNorm statistics in f32 even in an f64 run; against qwen3vl-text-mini that choice
// is invisible (both land at ~3e-7, a floor set by the file's f32-rounded weights and outputs), so the f64
// path stays plain f64.
//
// bf16 (GPU only) is the released recipe as transformers runs a bf16 Qwen3-VL: bf16 weights and activations, GEMMs
// accumulating in f32, RMSNorm statistics in f32 with the normalised row rounded to bf16 before the weight multiplies
// it (ops::rms_norm with NormRound::twice), cos/sin computed in f32 and rounded to bf16, the rotation in bf16 steps,
// SwiGLU's silu(gate) and product rounded, every residual add rounded. A unit's output projection stays in f32 until
// the fold (text_tp.cpp), so the residual takes each projection rounded once, as from one GEMM.
#pragma once
#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "distributed/comm.h"
#include "distributed/partition.h"
#include "io/layer_stream.h"
#include "io/safetensors.h"
#include "model/qwen3vl/weights.h"

namespace h3 {

struct Qwen3VlTextConfig {
  // Defaults are Qwen3-VL-32B's text model (the H3 text encoder).
  int64_t vocab_size = 151936, hidden = 5120, intermediate = 25600, n_layers = 64;
  int64_t n_heads = 64, n_kv_heads = 8, head_dim = 128;
  double rms_eps = 1e-6, rope_theta = 5e6;
  std::array<int64_t, 3> mrope_section{24, 20, 20};  // frequencies given to the t, h and w position axes
  bool mrope_interleaved = true;                     // Qwen3-VL: t,h,w,t,h,w,... ; false: Qwen2-VL blocks

  // Reads a transformers config (flat, or with a "text_config" object); absent fields keep the defaults.
  // Accepts both "rope_parameters" and the older "rope_theta" + "rope_scaling".
  static Qwen3VlTextConfig from_json_text(const std::string& text, const std::string& where);
  std::string summary() const;
};

// Where the text decoder's tensors live in `f`: the prefix before "embed_tokens.weight" ("weight." in golden
// files, "model.language_model." in transformers checkpoints). Throws when there is none.
std::string qwen3vl_text_prefix(const SafeTensors& f);
std::string qwen3vl_text_prefix(const Qwen3VlTextWeights& w);
// The config of the decoder in `f`: sizes from the tensor shapes and layer count, the rest from the file's
// "config" metadata when present, else the defaults above. Logs nothing; throws on inconsistent shapes.
Qwen3VlTextConfig detect_qwen3vl_text_config(const SafeTensors& f);
Qwen3VlTextConfig detect_qwen3vl_text_config(const Qwen3VlTextWeights& w);

// Inputs that replace or add to the residual stream (the Qwen3-VL vision tower's hook). Every tensor is
// [rows.size(), hidden], any float dtype, host or device; under tensor parallelism every rank passes the same.
struct TextExtras {
  std::vector<int64_t> rows;      // token positions, distinct, in [0, N)
  Tensor embeds;                  // [rows.size(), hidden] replace the token embeddings at those rows
  std::vector<Tensor> deepstack;  // deepstack[k] [rows.size(), hidden] is added to the hidden state at `rows`
                                  // after decoder layer k (k = 0..2); hidden_states[k+1] reports the layer's
                                  // output before the addition (as transformers records it)
};

struct Qwen3VlTextOptions {
  Precision precision = Precision::f32;  // f32; f64 on the CPU only; bf16 on the GPU only; fp8 is refused
  Device device = Device::cpu;           // Device::cuda: weights and activations on the GPU (bf16 or f32)
  Comm* comm = nullptr;  // tensor-parallel group (all its ranks construct and call forward together); null = 1
  // Layer streaming (io/layer_stream.h, model/qwen3vl/text_streaming.cpp) for a device that cannot hold the tower:
  // `resident_layers` of the loaded decoder layers stay on the device (spread_resident chooses which; -1: all, no
  // streaming); the others' unit weights (q/k/v/o, [up; gate], down: all of a layer but its four norm vectors) are
  // parked in page-locked host memory after loading and copied into a ring of `ring_slots` device slots ahead of the
  // layer that needs them. Embeddings, norms and the final norm stay resident. Under tensor parallelism each rank parks
  // its own slices. The same kernels run on the same bytes: the outputs are bitwise those of the resident tower.
  int resident_layers = -1;
  int ring_slots = 3;
  // Where the streamed layers wait (the memory plan's choice, io/layer_stream.h's rule): page-locked copies (pinned),
  // or the checkpoint, read through a page-locked staging ring at each copy (mapped: for hosts whose memory cannot
  // hold the copies; each unit's [up; gate] is read as its two stored slices, one under the other). Mapped needs a
  // checkpoint file whose stored dtype is the compute dtype (bf16 for a bf16 tower); otherwise the tower is refused
  // before anything loads, naming the tensor (`host`: the host memory the plan had, for that message).
  ParkSource park_source = ParkSource::pinned;
  HostMemory host = {};
};

// Called by forward() before each decoder layer it runs, with the layer's index and the number of layers the call
// runs, on every rank of the communicator (ranks beyond T call it in the same order, with nothing to compute
// between the calls). It may throw to end the forward (cancellation between layers); any agreement between ranks
// is the hook's own business (the generator's makes one collective control word per layer).
using TextLayerHook = std::function<void(int64_t layer, int64_t layers)>;

struct Qwen3VlTextOutputs {
  std::map<int64_t, Tensor> hidden_states;  // the requested indices only, each [N, hidden]
  Tensor last_normed;                       // final norm of the last layer's output, when requested
};

class Qwen3VlTextModel {
 public:
  // Loads the embeddings and decoder layers [0, n_layers) (all when n_layers < 0) from `w`, converted to the
  // compute dtype where they land (on the GPU: the stored bytes go over, one tensor at a time); loads the final norm
  // only when every layer is loaded. Under tensor parallelism each rank reads only its units' slices (collective
  // over opt.comm). Throws listing every missing or mis-shaped key, or for a precision the device does not run.
  Qwen3VlTextModel(const Qwen3VlTextWeights& w, const Qwen3VlTextConfig& cfg, int64_t n_layers,
                   const Qwen3VlTextOptions& opt);
  Qwen3VlTextModel(const SafeTensors& f, const Qwen3VlTextConfig& cfg, int64_t n_layers, Precision precision);
  ~Qwen3VlTextModel();
  Qwen3VlTextModel(const Qwen3VlTextModel&) = delete;
  Qwen3VlTextModel& operator=(const Qwen3VlTextModel&) = delete;

  const Qwen3VlTextConfig& config() const { return cfg_; }
  int64_t layers_loaded() const { return static_cast<int64_t>(layers_.size()); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // This rank's units [g0, g1) of the tensor-parallel split (empty on ranks beyond its degree).
  Range units() const { return units_; }
  // Bytes of weights this rank holds: replicated (embeddings, norms) and its units' slices.
  size_t bytes_replicated() const { return bytes_replicated_; }
  size_t bytes_sharded() const { return bytes_sharded_; }
  // Of the loaded layers, how many are streamed (0: all resident), and the streamer's counts (zero when none).
  int64_t layers_streamed() const;
  LayerStreamStats stream_stats() const;
  // Between requests of a tower that stays loaded: the streamed layers' ring goes back to the device
  // (LayerStreamer::stop); the next pass takes it again. A no-op without streaming.
  void stop_streaming();
  // Bytes of this rank's unit weights parked in host memory (counted in bytes_sharded() too).
  size_t bytes_streamed() const { return bytes_streamed_; }
  // What the GPU load read and how fast (empty on the CPU).
  const LoadReport& load_report() const { return load_report_; }
  std::string describe_shard() const;

  // Runs the layers needed for the requested hidden states (indices 0..layers_loaded()); collective over the
  // communicator, every rank gets every output (host tensors on the CPU, device tensors on the GPU).
  // `mrope_positions` is [3 * N] (t row, then h, then w); null means text positions (every axis = token
  // index). `extras` (optional) replaces embedding rows and adds DeepStack features (TextExtras). `before_layer`
  // (optional) runs before each layer (TextLayerHook).
  Qwen3VlTextOutputs forward(const std::vector<int32_t>& ids, const std::vector<int64_t>& keep, bool want_normed,
                             const std::vector<int64_t>* mrope_positions = nullptr, const TextExtras* extras = nullptr,
                             const TextLayerHook& before_layer = {}) const;
  // hidden_states[k] (k = 50 is the H3 conditioning).
  Tensor hidden_state(const std::vector<int32_t>& ids, int64_t k) const;

 private:
  // One tensor-parallel unit of a layer (see the top of this file): KV head g with its query heads, FFN chunk g.
  struct Unit {
    Tensor q, k, v;  // rows of q_proj / k_proj / v_proj: [heads_per_kv * D, hidden], [D, hidden], [D, hidden]
    Tensor o;        // columns of o_proj for those query heads: [hidden, heads_per_kv * D]
    Tensor up_gate;  // [up rows of the chunk; gate rows of the chunk]: [2 * F_g, hidden]
    Tensor down;     // columns of down_proj for the chunk: [hidden, F_g]
  };
  struct Layer {
    Tensor in_norm, q_norm, k_norm, post_norm;  // replicated
    std::vector<Unit> units;                    // this rank's units g0..g1-1
  };
  // A decoder layer's weights for one step of compute(): the resident layer itself, or a streamed layer with its
  // units' tensors as views into a ring slot (LayerStreamer::acquire, in park_units' order). release() once the
  // layer's kernels are queued (the slot is refilled then; the views must not be used after); a hold ended by an
  // exception releases in its destructor. text_streaming.cpp.
  class LayerHold {
   public:
    LayerHold(const Qwen3VlTextModel& m, int64_t layer);
    ~LayerHold();
    LayerHold(const LayerHold&) = delete;
    LayerHold& operator=(const LayerHold&) = delete;
    const Layer& layer() const { return *layer_; }
    void release();

   private:
    LayerStreamer* streamer_ = nullptr;  // null: a resident layer
    int index_ = 0;
    Layer views_;
    const Layer* layer_ = nullptr;
  };
  // Where unit g of a layer comes from: q, k, v, o, up, gate, down as stored tensors (layer-relative keys, the whole
  // stored shape) and the rows / columns the unit keeps of each (text.cpp).
  struct UnitPart {
    std::string key;
    Shape shape;
    Slice rows, cols;
  };
  std::vector<UnitPart> unit_parts(int64_t g) const;
  // Load time: the streamer for the layers spread_resident does not keep (none when all are kept); for the mapped
  // source every streamed unit tensor checked against the checkpoint (`prefix`: the decoder's) before anything loads.
  void plan_streaming(int64_t n_layers, const Qwen3VlTextOptions& opt, const Qwen3VlTextWeights& w,
                      const std::string& prefix);
  // A streamed layer read from the checkpoint at each copy: its units' tensors as spans of the files.
  void park_units_mapped(int64_t layer, Layer& L, const Qwen3VlTextWeights& w, const std::string& layer_prefix);
  bool streams(int64_t layer) const;
  // Moves a loaded streamed layer's unit tensors into the streamer (their device memory goes back); the units keep
  // their count, with undefined tensors.
  void park_units(int64_t layer, Layer& L);
  // After the last layer is parked: allocates the ring and starts the first copies; logs the streamer's summary.
  void start_streaming();

  // The model's RMSNorm over groups of `group` channels. f64 (CPU only) follows the reference's flow, which
  // normalizes in f32 even in its f64 run (ops::rms_norm with NormRound::f32_in_f64_weight_f64); f32
  // and the GPU use ops::rms_norm.
  Tensor norm(const Tensor& x, const Tensor& w, int64_t group) const;
  Tensor attention_partial(const Unit& u, const Tensor& h, const Layer& L, const Tensor& cos, const Tensor& sin) const;
  Tensor mlp_partial(const Unit& u, const Tensor& h) const;
  // sum over all G units of their partials, folded in unit order (collective over the tensor-parallel group).
  Tensor fold_units(const std::vector<Tensor>& partials, const std::string& what) const;
  Qwen3VlTextOutputs compute(const std::vector<int32_t>& ids, const std::vector<int64_t>& keep, bool want_normed,
                             int64_t last, const std::vector<int64_t>* mrope_positions, const TextExtras* extras,
                             const TextLayerHook& before_layer) const;

  Qwen3VlTextConfig cfg_;
  DType dtype_;
  Device device_ = Device::cpu;
  Comm* comm_ = nullptr;           // everyone (null: one rank)
  std::unique_ptr<Comm> tp_comm_;  // the ranks holding units (null when all of comm_ or one rank)
  int tp_size_ = 1, tp_rank_ = 0;  // T and this rank's place (tp_rank_ = -1 beyond T)
  Range units_;                    // this rank's units
  std::vector<Range> unit_parts_;  // units of each tensor-parallel rank
  size_t bytes_replicated_ = 0, bytes_sharded_ = 0;
  LoadReport load_report_;
  Tensor embed_, final_norm_;
  std::vector<Layer> layers_;
  // The streamed layers (null: every layer resident). The ring is shared, so forwards of a streamed tower run one
  // at a time (stream_mu_).
  std::unique_ptr<LayerStreamer> streamer_;
  std::vector<bool> streamed_;  // per loaded layer (plan_streaming)
  ParkSource park_source_ = ParkSource::pinned;
  mutable std::mutex stream_mu_;
  size_t bytes_streamed_ = 0;
};

}  // namespace h3

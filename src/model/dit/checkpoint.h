// DiT checkpoints in every accepted layout, mapped onto the diffusers parameter names without reading tensor data:
//   diffusers   transformer_blocks.N.attn.to_q/to_k/to_v, ff.net.0.proj = [value; gate]   (file or folder + index)
//   official    blocks.N.attn.qkv_proj per-head interleaved [h0: q k v | h1: q k v | ...], mlp.fc1 = [gate; value]
//   comfy       like official but qkv_proj blocked [q_all; k_all; v_all]; optional "model.diffusion_model." prefix
//   golden      a shared/golden file: "weight.<diffusers key>" next to inputs and outputs
//   procedural  "procedural:NAME[:seed=N]" (NAME = mini | fullwidth-1block | full), generated on demand
// Only the header is read at open(); get() materialises one tensor (applying the qkv split / fc1 swap).
#pragma once
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "io/device_loader.h"
#include "io/quant.h"
#include "io/safetensors.h"
#include "model/dit/config.h"

namespace h3 {

struct LoraFile;  // model/dit/lora.h

enum class DitLayout { diffusers, official, comfy, golden, procedural };
std::string_view layout_name(DitLayout l);

// How qkv_proj rows are ordered in official/comfy-named files.
enum class QkvOrder { unknown, interleaved, blocked };

struct DitCheckpointOptions {
  QkvOrder qkv_order = QkvOrder::unknown;  // override detection ("--qkv-layout")
};

class DitCheckpoint {
 public:
  static DitCheckpoint open(const std::string& path, const DitCheckpointOptions& opt = {});
  // Procedural weights for any config (the named ones are reachable through open("procedural:NAME")).
  static DitCheckpoint procedural(const DitConfig& config, uint64_t seed, const std::string& label);

  const std::string& path() const { return path_; }
  DitLayout layout() const { return layout_; }
  QkvOrder qkv_order() const { return qkv_order_; }
  const DitConfig& config() const { return config_; }
  const std::string& config_source() const { return config_source_; }
  // One line on what was detected and why, for the log.
  std::string detection_summary() const;
  const std::vector<std::string>& files() const { return file_names_; }

  // Stored dtype of a parameter (f32 for procedural).
  DType stored_dtype(const std::string& key) const;
  // The parameter under its diffusers name, in its stored dtype (procedural: f32); with LoRAs added, adapted
  // parameters come back merged (W + s*B*A, f32; model/dit/lora.h).
  Tensor get(const std::string& key) const;
  // Rows [begin, end) / columns [begin, end) of a 2-D parameter, merged with the LoRAs on that block only (bitwise
  // the same values as the rows / columns of get(key)).
  Tensor get_rows(const std::string& key, int64_t begin, int64_t end) const;
  Tensor get_columns(const std::string& key, int64_t begin, int64_t end) const;
  // Adds a LoRA merged on every later get() (model/dit/lora.cpp). interleaved_override: -1 detect, 0 blocked, 1
  // interleaved.
  void add_lora(const std::string& path, double strength, int interleaved_override = -1);
  const std::vector<std::shared_ptr<const LoraFile>>& loras() const { return loras_; }
  // FNV-1a over the LoRAs' applied tensors and scales, in order (the value of an empty list when none).
  uint64_t lora_digest() const;
  // The same on `device`: procedural weights are generated there directly (no host copy), file weights are copied.
  Tensor get(const std::string& key, Device device) const;
  // How rows `rows` (ranges of the parameter's rows, in order; all when empty) and, of a 2-D parameter, columns
  // `cols` (all when empty) of `key` are read straight from its file (io/device_loader.h): the qkv split and the
  // fc1 swap become row ranges of the stored tensor, so a rank reads only its slices. fp8_scale > 0: the stored
  // values are FP8 e4m3 to multiply by it (the per-tensor "fp8" and "scaled_fp8" formats). nullopt when the value
  // has to be computed on the host instead: procedural weights, the other quantized formats, LoRAs.
  struct StoredRead {
    TensorRead read;
    float fp8_scale = 0;
  };
  std::optional<StoredRead> stored_read(const std::string& key, const std::vector<RowRange>& rows = {},
                                        RowRange cols = {}) const;
  // Keeps this checkpoint's files open and mapped for as long as the result lives (the TensorReads of stored_read
  // point into them): for readers that outlive the checkpoint object (a model streaming from it).
  std::shared_ptr<const void> keep_files() const;
  // Bytes of parameter data as stored, and the count per stored dtype.
  size_t stored_bytes() const;
  std::map<DType, int64_t> dtype_counts() const;
  // Quantized parameters by format ("fp8", "int8", "int8-convrot", "nvfp4"; a fused qkv counts three times).
  std::map<std::string, int64_t> quant_counts() const;
  uint64_t seed() const { return seed_; }

 private:
  struct Source {
    int file = -1;    // index into files_, -1 for procedural
    std::string key;  // key inside the file
    enum Kind { plain, qkv_part, swap_halves } kind = plain;
    int part = 0;       // 0 q, 1 k, 2 v for qkv_part
    QuantSpec quant{};  // quantized weights: dequantized (in stored row order) before the split / swap
  };
  std::string path_;
  DitLayout layout_ = DitLayout::diffusers;
  QkvOrder qkv_order_ = QkvOrder::unknown;
  DitConfig config_;
  std::string config_source_;
  std::string detection_reason_;
  uint64_t seed_ = 0;
  std::vector<std::shared_ptr<SafeTensors>> files_;
  std::vector<std::string> file_names_;
  std::map<std::string, Source> sources_;
  std::vector<std::shared_ptr<const LoraFile>> loras_;
  Tensor get_base(const std::string& key) const;  // the stored parameter, without LoRAs
  // The phases of open(): a procedural name; the layout (key naming, qkv order) of the files, returning the key
  // prefix to strip; every stored key mapped to its diffusers name (returns the logical shapes); the config; the
  // check of every parameter against it.
  static DitCheckpoint open_procedural(const std::string& path);
  std::string detect_layout(const DitCheckpointOptions& opt, const std::map<std::string, std::string>& meta,
                            bool sharded);
  std::map<std::string, Shape> map_keys(const std::string& strip,
                                        const std::vector<std::map<std::string, QuantSpec>>& quant,
                                        std::vector<std::string>& unexpected);
  void read_config(const std::string& config_text, const std::string& config_where,
                   const std::map<std::string, std::string>& meta, const std::map<std::string, Shape>& shapes);
  void check_parameters(const std::map<std::string, Shape>& shapes, std::vector<std::string> unexpected) const;
};

// Released/ComfyUI parameter name -> diffusers name ("" when it has none; qkv_proj keeps its fused name).
std::string dit_official_to_diffusers(const std::string& key);

}  // namespace h3

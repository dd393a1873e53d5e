// Weight loading at the speed of the disk. A tensor's bytes go from its file to the device through page-locked
// staging buffers: several threads pread the next part of the file into one buffer while the copy queued from the
// previous buffer runs (B buffers of C bytes in rotation; a buffer is refilled once the copy queued from it has
// completed), so reading and copying overlap and the disk (or the page cache) sets the pace. The stored dtype
// travels; the conversion the model wants (f32 -> bf16, bf16 -> f32, FP8 e4m3 quantization with a per-tensor or
// per-row scale) runs on the device afterwards. A read may gather parts of a stored tensor (row ranges, one column
// range), so a tensor-parallel rank reads only its slices and fused layouts (the DiT's qkv_proj and fc1, the video
// VAE's to_qkv) are split while reading. Every model's loading goes through one DeviceLoader per component, which
// reports what it read and how fast (LoadReport).
//
// On Device::cpu the same reads land in host tensors (parallel pread, conversions on the host); FP8 quantization
// is a GPU step. Either way the bytes read are scanned for NaN / Inf on the host (Options::refuse_non_finite).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "io/safetensors.h"

namespace h3 {

// Rows [begin, end) of a tensor's first dimension.
struct RowRange {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
};

// A gather of bytes of one stored tensor into one contiguous tensor of `shape` (the stored dtype): the spans, each
// an offset from the stored tensor's first byte and a length, are concatenated in order.
struct TensorRead {
  const SafeTensors* file = nullptr;
  std::string key;
  DType dtype = DType::f32;
  Shape shape;
  struct Span {
    size_t offset = 0, bytes = 0;
  };
  std::vector<Span> spans;
  size_t bytes() const;
};

// Bytes [from, from + bytes) of a gather as reads of its stored tensor, each at most piece_bytes: `src` is the
// offset in the stored tensor (TensorRead::Span::offset's frame), `dst` the offset from `from` in the gathered bytes.
struct ReadPiece {
  size_t src = 0, bytes = 0, dst = 0;
};
std::vector<ReadPiece> read_pieces(const TensorRead& r, size_t from, size_t bytes, size_t piece_bytes);

// All of `key`.
TensorRead read_tensor(const SafeTensors& f, const std::string& key);
// The listed ranges of `key`'s first dimension, in the order given, and of a 2-D tensor only columns
// [cols.begin, cols.end) when cols is not empty: result [sum of row counts, columns (or the stored trailing
// dimensions)]. Row r, column c of a [R, C] tensor lives at element r * C + c; neighbouring spans are merged, so a
// whole tensor is one span. Throws naming the file and key for ranges outside the tensor.
TensorRead read_rows(const SafeTensors& f, const std::string& key, const std::vector<RowRange>& rows,
                     RowRange cols = {});

// What one loader did; `label` names the component ("DiT", "video VAE", ...).
struct LoadReport {
  std::string label;
  Device device = Device::cpu;
  int64_t tensors = 0;      // read from files
  int64_t generated = 0;    // made where they live instead (procedural weights)
  size_t file_bytes = 0;    // bytes read from files
  size_t result_bytes = 0;  // bytes of the tensors handed out (read and generated)
  double seconds = 0;       // wall time from the loader's creation to finish(), conversions included
  double read_seconds = 0;  // of that, reading files into staging buffers (or host tensors)
  double wait_seconds = 0;  // of that, waiting for a staging buffer's copy to complete
  double gb_per_s() const { return seconds > 0 ? static_cast<double>(file_bytes) / seconds / 1e9 : 0.0; }
  // "DiT: 1,234 tensors, 33.10 GB read in 6.21 s = 5.33 GB/s (reading 5.90 s, waiting for copies 0.05 s) ..."
  std::string summary() const;
};

class DeviceLoader {
 public:
  struct Options {
    size_t chunk_bytes = size_t{64} << 20;  // one staging buffer
    int buffers = 3;                        // in rotation: one being filled, the others' copies in flight
    size_t piece_bytes = size_t{4} << 20;   // the unit of parallel reads (16 in flight per buffer)
    // Refuse float tensors holding NaN or Inf (core/finite.h), found in each piece as it is read: a damaged weight
    // stops the load naming its file, key and element instead of turning a whole run into NaNs. The scan runs on
    // the reading threads over bytes they just wrote, so the disk still sets the pace.
    bool refuse_non_finite = true;
  };
  DeviceLoader(Device device, std::string label);
  DeviceLoader(Device device, std::string label, const Options& options);
  ~DeviceLoader();  // waits for the copies still queued from its buffers
  DeviceLoader(const DeviceLoader&) = delete;
  DeviceLoader& operator=(const DeviceLoader&) = delete;

  Device device() const { return device_; }
  // The gathered bytes on the loader's device in `dtype`: the stored dtype as it is, another float dtype converted
  // there, or fp8_e4m3 quantized there (per tensor, or per row when fp8_rows: ops::quantize_fp8 / _rows; GPU only).
  // A stored fp8_e4m3 tensor asked for as fp8_e4m3 comes back as stored, without a scale (the caller has it).
  Tensor load(const TensorRead& r, DType dtype, bool fp8_rows = false);
  Tensor load(const SafeTensors& f, const std::string& key, DType dtype) { return load(read_tensor(f, key), dtype); }
  // Counts a tensor made on the device instead of read (procedural weights) in the report.
  void note_generated(const Tensor& t);
  // Waits for everything queued, closes the report and logs its summary once (info). Later loads reopen it.
  const LoadReport& finish();
  const LoadReport& report() const { return report_; }

 private:
  struct Staging {
    std::byte* data = nullptr;
    size_t fill = 0;
    void* event = nullptr;  // recorded after the last copy queued from this buffer
  };
  void read_into(const TensorRead& r, size_t from, size_t bytes, std::byte* dst);
  void refuse_if_non_finite(const TensorRead& r);
  void stage(const TensorRead& r, void* device_dst);
  void rotate();
  void wait_all() noexcept;

  Device device_;
  Options opt_;
  LoadReport report_;
  int64_t start_ns_ = 0;
  bool open_ = true;
  std::vector<Staging> bufs_;
  size_t cur_ = 0;
  // Non-finite values found in the tensor being loaded: their count and the first one's element in the stored
  // tensor (not in the gathered part).
  int64_t bad_count_ = 0, bad_first_ = -1;
};

}  // namespace h3

// Internals shared by the media writers (not part of the public media API): the ".partial" file that becomes
// the final file only on commit, libav error text, and reading pixels / samples out of tensors in their
// documented layouts (media/mp4_writer.h).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace h3::media {

// `final_path + ".partial"`, removed on destruction unless commit() renamed it onto `final_path`.
class PartialFile {
 public:
  explicit PartialFile(std::string final_path);
  ~PartialFile();
  PartialFile(const PartialFile&) = delete;
  PartialFile& operator=(const PartialFile&) = delete;
  const std::string& partial() const { return partial_; }
  const std::string& final_path() const { return final_; }
  // Renames the partial file onto the final path (throws h3::Error naming both on failure).
  void commit();
  // Removes the partial file now (no error when it does not exist).
  void discard() noexcept;
  bool committed() const { return committed_; }

 private:
  std::string final_, partial_;
  bool committed_ = false;
};

// Refuses a final path that cannot be written: empty, an existing directory, or in a folder that does not
// exist. `what` names the caller in the message ("mp4", "wav", ...).
void check_output_path(const std::string& path, const char* what);

// av_strerror text of a libav error code.
std::string av_error_text(int code);

// Pixels [3, T, H, W] (or [1, 3, T, H, W]) f32/f64 on the host; throws h3::Error naming `where` otherwise.
struct PixelView {
  const float* f32 = nullptr;  // exactly one of f32 / f64 is set
  const double* f64 = nullptr;
  int64_t frames = 0, height = 0, width = 0;
  // Channel c (0 = R, 1 = G, 2 = B) of frame f at (y, x), clamped to [0, 1] (NaN -> 0).
  float at(int c, int64_t f, int64_t y, int64_t x) const;
  // Frame f as packed 8-bit RGB (round to nearest), row stride 3 * width.
  void rgb24(int64_t f, uint8_t* out, int64_t stride) const;
};
PixelView pixel_view(const Tensor& pixels, const std::string& where);

// Waveform [channels, N] (or [channels, 1, N]) f32/f64 on the host.
struct WaveView {
  const float* f32 = nullptr;
  const double* f64 = nullptr;
  int64_t channels = 0, samples = 0;
  float at(int64_t c, int64_t i) const;  // clamped to [-1, 1] (NaN -> 0)
};
WaveView wave_view(const Tensor& wave, const std::string& where);

}  // namespace h3::media

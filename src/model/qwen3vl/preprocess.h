// Qwen2-VL-style vision preprocessing as Qwen3-VL (and H3's conditioner) uses it, and the prompt pieces that carry
// vision tokens: the smart-resize grid, resize, rescale + normalise, patch flattening in the processor's order,
// 2 fps video frame sampling with timestamp text, transformers' get_rope_index for Qwen3-VL, and H3's labelled
// prompt (`<Picture i>: `, `<Audio j>: `, `<Video k>: `; h3-model-spec.md section 5).
//
// Pixel row layout (what the vision tower's patch embedding expects), for frames [F, H, W, C] padded to a multiple
// of tp by repeating the last frame, grid (t, h, w) = (F/tp, H/p, W/p):
//   row    = ((ti * (h/m) + bh) * (w/m) + bw) * m*m + mh * m + mw
//   column = ((c * tp + dt) * p + y) * p + x
//   value  = frame[ti*tp + dt][(bh*m + mh)*p + y][(bw*m + mw)*p + x][c]
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "model/qwen3vl/vision.h"

namespace h3 {

struct VlPreprocessConfig {
  int64_t patch = 16, temporal_patch = 2, merge = 2;
  double mean[3] = {0.5, 0.5, 0.5}, std[3] = {0.5, 0.5, 0.5};  // H3's processor config (OFF processor/)
  int64_t min_pixels = 65536, max_pixels = 16777216;           // images; videos use 4096 / 25165824
  int64_t factor() const { return patch * merge; }
  static VlPreprocessConfig video_defaults();
};

// Qwen2-VL smart_resize: both sides multiples of `factor`, area within [min_pixels, max_pixels], aspect kept
// as closely as possible (Python round-half-even for the first guess). Returns (height, width); throws on sides
// under 10 pixels or an aspect ratio above 200.
std::pair<int64_t, int64_t> smart_resize(int64_t height, int64_t width, int64_t factor, int64_t min_pixels,
                                         int64_t max_pixels);

// Resizes a u8 image [H, W, C] to [out_h, out_w, C] with PIL's bicubic filter (a = -0.5, support widened by the
// downscale factor, i.e. antialiased), horizontal pass then vertical, each rounded to u8 with PIL's 22-bit
// fixed-point coefficients. A side that keeps its size is not filtered.
Tensor resize_bicubic_u8(const Tensor& image, int64_t out_h, int64_t out_w);

struct VlPixels {
  Tensor pixels;  // f64 [t*h*w, C*tp*p*p], the layout above
  GridThw grid{};
};

// Frames (u8 [H, W, 3], all the same size; one frame for an image) -> smart-resized, rescaled by 1/255,
// normalised, padded and flattened. Throws on empty input or mismatched frame sizes.
VlPixels preprocess_frames(const std::vector<Tensor>& frames, const VlPreprocessConfig& cfg);
// The flattening alone, for frames already at a multiple of patch*merge: f64 [F, H, W, C] values -> rows.
VlPixels patchify_frames(const Tensor& frames, const VlPreprocessConfig& cfg);

// Source frame indices sampled at `target_fps` from a stream of n_frames at `fps`: round(k * fps / target_fps)
// for k = 0, 1, ... while inside the stream, duplicates dropped (24 fps at 2 fps = every 12th frame).
std::vector<int64_t> sample_frame_indices(int64_t n_frames, double fps, double target_fps = 2.0);
// One timestamp per temporal patch: the mean of its first and last frame's time (index / fps), the index list
// padded to a multiple of `temporal_patch` by repeating the last (transformers' _calculate_timestamps).
std::vector<double> temporal_patch_timestamps(std::vector<int64_t> indices, double fps, int64_t temporal_patch);
// "<%.1f seconds>" (printf rounding of the binary value, as Python's format: 0.25 -> "0.2").
std::string timestamp_text(double seconds);

struct VisionTokenIds {
  int32_t vision_start = 151652, vision_end = 151653, image = 151655, video = 151656;
};

// transformers' Qwen3-VL get_rope_index for one unpadded prompt: [3 * N] positions (t row, then h, then w).
// Text advances every axis by one per token; a vision block of (h/m) x (w/m) tokens starting at next free index s
// gets (s, s + row, s + col) and text resumes at max + 1. Each video frame (temporal patch) is its own block with
// t = 0 (time is in the timestamp text). Image blocks take image_grids in order, video blocks the frames of
// video_grids in order. Throws when the placeholder runs and the grids disagree.
std::vector<int64_t> qwen3vl_rope_index(const std::vector<int32_t>& ids, const std::vector<GridThw>& image_grids,
                                        const std::vector<GridThw>& video_grids, int64_t merge,
                                        const VisionTokenIds& tok = {});

// One reference in H3's prompt, in presentation order.
struct PromptMedia {
  enum class Kind { image, audio, video } kind = Kind::image;
  GridThw grid{};                  // image/video: the processor's grid
  bool video_has_audio = false;    // video: its soundtrack is labelled "<Audio j>: " first
  std::vector<double> timestamps;  // video: one per temporal patch (temporal_patch_timestamps)
};

// The text H3 tokenises (with literal special tokens): per reference "<Picture i>: " + vision block,
// "<Audio j>: ", or ["<Audio j>: "] "<Video k>: " + per frame "<t seconds>" + vision block, numbered from 1 per
// modality; then the prompt verbatim. A vision block is <|vision_start|> + pad * (t*h*w / m^2) + <|vision_end|>.
std::string h3_prompt_text(const std::vector<PromptMedia>& media, const std::string& prompt, int64_t merge);

}  // namespace h3
